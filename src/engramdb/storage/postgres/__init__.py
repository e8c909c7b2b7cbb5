"""The PostgreSQL backend: engine tables in schema ``engram``, raw-SQL scopes isolated by roles and grants."""
