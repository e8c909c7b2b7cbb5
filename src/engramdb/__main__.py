"""``python -m engramdb``: the same command line as the ``engramdb`` console script."""

from engramdb.cli import main

if __name__ == "__main__":
    main()
