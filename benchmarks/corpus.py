"""Synthetic corpus of realistic agent memories, for recall and scale benchmarks.

`generate` streams `MemorySpec` records — what an LLM agent team would store over a few months:
devops incidents, support tickets, sales calls, research notes, personal errands, travel and
finance. Content is rendered from topic-specific sentence templates whose slots are drawn from
lexicons and per-tenant entity pools with Zipfian popularity, so a few people, customers,
services and tickets recur a lot while a long tail appears rarely. About 3% of memories restate
an earlier one with small edits (``duplicate_of``), about 2% contradict an earlier fact (a
``contradicts`` link), and about 20% carry links to earlier memories of the same tenant.

`queries` turns a sample of the corpus into evaluation queries with known relevant keys: exact
keywords, partial-keyword questions and paraphrases that share few words with their target.

Everything is seeded and pure standard library; 1M memories take well under a minute.

    python benchmarks/corpus.py --n 1000 --seed 0 --out corpus.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------------
# Public records
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemorySpec:
    """One synthetic memory, ready to be written into an engine.

    ``links`` point only to earlier memories of the same tenant that the author can see.
    ``topic``, ``template``, ``facts`` and ``duplicate_of`` are ground truth for benchmarks:
    the template id, the canonical slot values it was rendered from, and, for a restatement,
    the key of the memory it restates.
    """

    key: str
    tenant: str
    agent: str
    shared: bool
    type: str
    title: str
    content: str
    tags: tuple[str, ...]
    entities: tuple[str, ...]
    importance: float
    salience: float
    confidence: float
    created_at: float
    status: str | None
    links: tuple[tuple[str, str], ...]
    topic: str
    template: str
    facts: tuple[tuple[str, str], ...]
    duplicate_of: str | None = None

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict of every field (links as ``[key, edge_type]`` lists, facts as a dict)."""
        return {
            "key": self.key,
            "tenant": self.tenant,
            "agent": self.agent,
            "shared": self.shared,
            "type": self.type,
            "title": self.title,
            "content": self.content,
            "tags": list(self.tags),
            "entities": list(self.entities),
            "importance": self.importance,
            "salience": self.salience,
            "confidence": self.confidence,
            "created_at": self.created_at,
            "status": self.status,
            "links": [list(link) for link in self.links],
            "topic": self.topic,
            "template": self.template,
            "facts": dict(self.facts),
            "duplicate_of": self.duplicate_of,
        }


@dataclass(frozen=True, slots=True)
class QuerySpec:
    """An evaluation query asked by `agent` in `tenant`; `relevant_keys` are the right answers.

    ``kind`` is ``exact``, ``partial`` or ``paraphrase``; ``target`` is the memory the query was
    written about (always among ``relevant_keys``).
    """

    text: str
    tenant: str
    agent: str
    relevant_keys: tuple[str, ...]
    kind: str = ""
    target: str = ""


# ---------------------------------------------------------------------------------------------
# Design constants
# ---------------------------------------------------------------------------------------------

TYPES: tuple[str, ...] = ("info", "episode", "todo", "skill", "reflection", "intent", "scratch")
#: Target share of each memory type (mostly info/episode, some todo/skill, few of the rest).
TYPE_WEIGHTS: dict[str, float] = {
    "info": 0.38,
    "episode": 0.27,
    "todo": 0.12,
    "skill": 0.10,
    "reflection": 0.05,
    "intent": 0.04,
    "scratch": 0.04,
}
EDGE_TYPES: tuple[str, ...] = (
    "derived_from",
    "created_by",
    "supports",
    "contradicts",
    "refines",
    "causes",
    "precedes",
    "related",
    "part_of",
)
TENANTS: tuple[str, ...] = (
    "acme",
    "globex",
    "initech",
    "umbrella",
    "hooli",
    "stark",
    "wayne",
    "wonka",
    "soylent",
    "cyberdyne",
    "tyrell",
    "oscorp",
)
TOPICS: tuple[str, ...] = ("devops", "support", "sales", "research", "errands", "travel", "finance")
AGENT_ID_RULE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}\Z")

#: Agents in roster order, with how often each writes about each topic.
AGENT_ROSTER: tuple[tuple[str, dict[str, float]], ...] = (
    ("researcher", {"research": 0.8, "devops": 0.05, "sales": 0.05, "finance": 0.05, "support": 0.05}),
    ("planner", {"devops": 0.2, "sales": 0.15, "research": 0.15, "errands": 0.1, "travel": 0.2, "finance": 0.2}),
    ("ops-bot", {"devops": 0.9, "support": 0.1}),
    ("support-bot", {"support": 0.85, "devops": 0.1, "sales": 0.05}),
    ("sales-assistant", {"sales": 0.75, "support": 0.1, "travel": 0.1, "finance": 0.05}),
    ("assistant", {"errands": 0.55, "travel": 0.3, "finance": 0.1, "sales": 0.05}),
    ("travel-agent", {"travel": 0.9, "finance": 0.1}),
    ("finance-bot", {"finance": 0.85, "sales": 0.1, "travel": 0.05}),
    ("scribe", dict.fromkeys(TOPICS, 1.0)),
    ("coder", {"devops": 0.7, "research": 0.3}),
    ("reviewer", {"devops": 0.5, "research": 0.3, "support": 0.2}),
    ("triage", {"support": 0.6, "devops": 0.4}),
    ("analyst", {"finance": 0.4, "sales": 0.3, "research": 0.3}),
    ("concierge", {"errands": 0.6, "travel": 0.4}),
    ("scheduler", {"errands": 0.3, "travel": 0.3, "sales": 0.2, "devops": 0.2}),
    ("qa-bot", {"devops": 0.6, "support": 0.4}),
)

#: Probability that a memory of each type is shared within its tenant (about 30% overall).
SHARED_P: dict[str, float] = {
    "info": 0.35,
    "episode": 0.25,
    "todo": 0.25,
    "skill": 0.45,
    "reflection": 0.30,
    "intent": 0.15,
    "scratch": 0.05,
}
#: Weights of importance 0..10 per type: right-skewed, commitments and skills rank higher.
IMPORTANCE_WEIGHTS: dict[str, tuple[int, ...]] = {
    "info": (2, 6, 12, 18, 18, 14, 10, 8, 6, 4, 2),
    "episode": (3, 8, 14, 18, 17, 13, 10, 7, 5, 3, 2),
    "todo": (1, 2, 5, 9, 13, 16, 17, 15, 11, 7, 4),
    "skill": (1, 2, 4, 8, 12, 16, 18, 16, 12, 7, 4),
    "reflection": (1, 2, 5, 10, 14, 17, 17, 14, 10, 6, 4),
    "intent": (1, 2, 4, 8, 12, 15, 17, 16, 12, 8, 5),
    "scratch": (20, 25, 20, 14, 9, 6, 3, 2, 1, 0, 0),
}
#: Mean confidence per type: observed episodes are sure, reflections and scratch notes less so.
CONFIDENCE_BASE: dict[str, float] = {
    "info": 0.85,
    "episode": 0.92,
    "todo": 0.9,
    "skill": 0.88,
    "reflection": 0.7,
    "intent": 0.85,
    "scratch": 0.55,
}
#: Edge types a new memory of each type uses for its links, most common first.
LINK_EDGES: dict[str, tuple[str, ...]] = {
    "info": ("related", "supports", "refines", "part_of", "derived_from"),
    "episode": ("precedes", "related", "causes", "part_of", "derived_from"),
    "todo": ("derived_from", "part_of", "related", "created_by"),
    "skill": ("derived_from", "refines", "related", "supports"),
    "reflection": ("derived_from",),
    "intent": ("related", "derived_from", "created_by", "part_of"),
    "scratch": ("related", "part_of"),
}
DUPLICATE_RATE = 0.03
CONTRADICTION_RATE = 0.02
#: Chance that an ordinary memory (not a reflection or contradiction) gets 1–3 links.
LINK_RATE = 0.17
REFLECTION_LINK_RATE = 0.85

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

# ---------------------------------------------------------------------------------------------
# Lexicons: "value|paraphrase|paraphrase; value; ..." — most popular first (Zipf rank order).
# ---------------------------------------------------------------------------------------------

LEXICON: dict[str, str] = {
    # devops
    "component": (
        "database|DB|datastore; cache|caching layer; message queue|broker; load balancer|traffic balancer; "
        "Postgres primary|main Postgres node; read replica|replica; Redis cluster|Redis; Kafka cluster|event bus; "
        "object storage|blob store; CDN|edge cache; DNS zone|name records; TLS certificate|SSL cert; "
        "Kubernetes cluster|k8s; node pool|worker nodes; CI pipeline|build pipeline; "
        "container registry|image registry; search cluster|Elasticsearch; service mesh|Istio; "
        "connection pool|pool of DB connections; cron scheduler|scheduled jobs; backup job|nightly backup; "
        "VPN gateway|VPN; firewall rules|firewall; autoscaler|autoscaling; ingress controller|ingress; "
        "secrets vault|Vault; log pipeline|log shipping; metrics stack|Prometheus setup; disk volumes|volumes; "
        "feature flag service|flag system; job queue|worker queue; session store|sessions; "
        "websocket tier|realtime layer; sharded index|index shards; rate limiter|throttling layer"
    ),
    "symptom": (
        "latency spike|slow responses; 502 errors|bad gateway errors; 500 errors|server errors; "
        "OOM kills|out-of-memory crashes; disk full alerts|disk running out of space; CPU saturation|pegged CPU; "
        "connection timeouts|requests timing out; replication lag|replica lag; memory leak|growing memory use; "
        "pod crash loops|containers restarting; failed health checks|health check failures; "
        "queue backlog|growing backlog; certificate expiry warnings|an expiring cert; "
        "DNS resolution failures|lookup errors; elevated error rate|more failures; deadlocks|lock contention; "
        "slow queries|sluggish SQL; packet loss|dropped packets; flaky tests|unstable tests; "
        "stuck deploys|a hung rollout; cache misses|a cold cache; throttled requests|rate limiting; "
        "clock drift|time skew; dropped websocket connections|realtime disconnects; "
        "stale reads|outdated data; thundering herd|retry flood; zombie processes|orphaned workers"
    ),
    "cause": (
        "a bad config push|a config change; an expired certificate|the cert lapsing; "
        "a missing index|no index on the table; a noisy neighbor|another workload hogging resources; "
        "a runaway cron job|a cron job gone wild; a memory leak in the worker|a leaking worker; "
        "a schema migration|the migration; a dependency upgrade|upgrading a library; "
        "a traffic spike from a campaign|marketing traffic; a DNS change|a DNS update; "
        "an exhausted connection pool|running out of connections; a retry storm|retries piling up; "
        "a full disk on the primary|the disk filling up; a race condition in the scheduler|a scheduler race; "
        "a bad feature flag|flag misconfiguration; a regional provider outage|a cloud provider incident; "
        "an unbounded query|a query without a limit; a leaked file handle|file descriptors running out; "
        "a kernel upgrade|the OS patch; an expired API token|a stale credential"
    ),
    "action": (
        "rolled back|reverted; restarted|bounced; scaled up|added capacity to; failed over|switched over; "
        "patched|hotfixed; drained|emptied; rotated|renewed; resized|grew; throttled|rate-limited; "
        "cordoned|isolated; reindexed|rebuilt; purged|flushed; redeployed|shipped again; vacuumed|cleaned up"
    ),
    "fix": (
        "roll back|revert; restart|bounce; scale up|add capacity to; fail over|switch over; patch|hotfix; "
        "drain|empty; rotate|renew; resize|grow; throttle|rate-limit; cordon|isolate; reindex|rebuild; "
        "purge|flush; redeploy|ship again; vacuum|clean up"
    ),
    "region": (
        "eu-west|the European region|Ireland; us-east|the US East region|Virginia; us-west|US West|Oregon; "
        "ap-south|the Mumbai region|India; ap-northeast|the Tokyo region|Japan; eu-central|Frankfurt; "
        "sa-east|the Sao Paulo region|Brazil; ca-central|the Canadian region|Canada; "
        "ap-southeast|the Singapore region|Singapore; af-south|the Cape Town region|South Africa"
    ),
    "env": "production|prod|live; staging|pre-prod; canary|the canary pool; dev|development; QA|the test environment",
    "tool": (
        "Grafana|the dashboards; PagerDuty|the pager; Terraform|infra code; Argo CD|the deploy tool; "
        "Datadog|monitoring; Sentry|the error tracker; Jenkins|the CI server; the runbook|the playbook; "
        "GitHub Actions|CI; Kibana|log search; Helm|the chart; Ansible|config management; "
        "Prometheus|metrics; OpsGenie|alerting; Honeycomb|tracing; Loki|the log store"
    ),
    "metric": (
        "p99 latency|tail latency; error rate|failure rate; CPU usage|processor load; memory usage|RAM; "
        "disk usage|storage; queue depth|backlog size; request rate|traffic; cache hit ratio|cache hits; "
        "build time|CI duration; uptime|availability; connection count|open connections; GC pauses|garbage collection"
    ),
    # support
    "issue": (
        "login failures|trouble signing in; double charges|being charged twice; "
        "password reset emails not arriving|missing reset emails; slow dashboard|dashboard lag; "
        "CSV export failing|a broken export; missing invoices|invoices not showing; sync errors|data not syncing; "
        "two-factor lockout|being locked out by 2FA; broken webhooks|webhooks not firing; "
        "wrong timezone on reports|a timezone bug; mobile app crashes|the app crashing; "
        "stuck data import|an import hanging; API rate limits|being throttled; "
        "SSO misconfiguration|single sign-on problems; notification spam|too many emails; "
        "empty search results|search returning nothing; seat limit reached|running out of seats; "
        "permission errors|access denied messages; duplicate contacts|repeated records; "
        "broken PDF reports|unreadable reports; calendar sync gaps|missing calendar events"
    ),
    "feature": (
        "bulk export|mass export; dark mode|a dark theme; audit log|activity history; SSO|single sign-on; "
        "custom roles|role permissions; API keys|access tokens; scheduled reports|recurring reports; "
        "Slack integration|the Slack app; offline mode|working offline; multi-currency|several currencies; "
        "usage alerts|quota warnings; sandbox|a test workspace; white labeling|custom branding; "
        "data retention settings|retention controls; webhooks|callbacks; SCIM provisioning|user provisioning"
    ),
    "channel": (
        "email|mail; phone|a call; chat|live chat; Slack|a shared channel; the portal|the help center; "
        "video call|Zoom; text message|SMS"
    ),
    "subject": (
        "contract|agreement; billing|payment; security|infosec; onboarding|setup; renewal|extension; "
        "invoice|bill; integration|connector; privacy|data protection; pricing|cost; compliance|audit"
    ),
    "plan": "Enterprise|top-tier; Business|mid-tier; Pro|professional; Starter|entry-level; Team|small-team; Free|no-cost",
    "sentiment": "frustrated|annoyed; happy|satisfied; confused|unsure; impatient|in a hurry; calm|patient; angry|upset",
    "cause_s": (
        "an expired card|an outdated payment method; a browser extension|a plugin conflict; "
        "a misconfigured identity provider|wrong IdP settings; aggressive spam filtering|their mail filter; "
        "stale cached data|an old cache; a wrong locale setting|regional settings; a known bug|an existing defect; "
        "an old app version|an outdated app; an admin permission change|a role change; "
        "a duplicate account|two accounts"
    ),
    # sales
    "role": (
        "CTO|technology chief; VP of Engineering|engineering head; head of procurement|purchasing lead; "
        "CFO|finance chief; IT director|IT lead; COO|operations chief; product lead|product owner; "
        "CISO|security chief; head of data|data lead"
    ),
    "stage": (
        "discovery|the first call; demo|product demo; proposal|quote; negotiation|price talks; "
        "legal review|contract review; pilot|trial; closed won|signed; closed lost|lost"
    ),
    "objection": (
        "price|cost; security review|infosec concerns; integration effort|implementation work; "
        "timing|their budget cycle; competitor lock-in|an existing contract; data residency|where data is stored; "
        "missing SSO|no single sign-on; procurement process|vendor onboarding; scalability|handling growth"
    ),
    "competitor": (
        "Vandelay; Pied Piper; Massive Dynamic; Sterling Cooper; Nakatomi; Virtucon; Gringotts; "
        "Prestige Worldwide; Dunder Mifflin; Bluth Company; Monsters Inc; Krusty Krab"
    ),
    "next_step": (
        "send a proposal|share pricing; book a technical demo|schedule a deep dive; loop in legal|involve counsel; "
        "share a case study|send references; set up a pilot|start a trial; "
        "finish the security questionnaire|complete the infosec review; draft an order form|prepare paperwork"
    ),
    "doc": (
        "security questionnaire|infosec form; pricing sheet|price list; case study|customer story; "
        "MSA|master agreement; SOW|statement of work; ROI calculator|value model; product roadmap|roadmap deck; "
        "NDA|non-disclosure agreement; quote|proposal; onboarding guide|setup guide"
    ),
    "daypart": "in the morning|before noon; after lunch|in the afternoon; late in the day|near end of day; early|first thing",
    # research
    "method": (
        "contrastive learning|contrastive training; retrieval augmentation|RAG; fine-tuning|further training; "
        "distillation|knowledge distillation; quantization|low-bit weights; beam search|wider decoding; "
        "mixture of experts|MoE routing; sparse attention|attention sparsity; curriculum learning|staged training; "
        "active learning|label selection; RLHF|learning from feedback; chain-of-thought prompting|step-by-step prompts; "
        "BM25|keyword baseline; dense retrieval|embedding search; reranking|a second-stage ranker; "
        "LoRA adapters|low-rank adapters; data augmentation|synthetic examples; ensembling|model ensembles; "
        "early stopping|stopping early; spaced repetition|review scheduling; ACT-R activation|activation-based recall; "
        "query expansion|expanded queries; late interaction|ColBERT-style scoring"
    ),
    "dataset": (
        "MS MARCO; Natural Questions|NQ; HotpotQA; SQuAD; LongMemEval; LoCoMo; BEIR; TREC-COVID; GSM8K; "
        "HumanEval; MMLU; WikiText; SupportQA|our ticket archive; ProdTraces|production logs"
    ),
    "metric_r": (
        "recall@10|top-10 recall; nDCG@10|ranking quality; MRR|reciprocal rank; accuracy|hit rate; F1|F-score; "
        "perplexity|PPL; exact match|EM; latency|response time; throughput|queries per second; "
        "calibration error|ECE"
    ),
    "finding": (
        "improves recall on long queries|helps long queries; hurts latency badly|slows things down a lot; "
        "only helps on small corpora|works just for small collections; is unstable across seeds|varies between runs; "
        "saturates after a few epochs|plateaus early; doubles the memory footprint|uses twice the memory; "
        "beats the baseline by a wide margin|clearly outperforms the baseline; "
        "matches the baseline at half the cost|costs half as much for the same result; overfits quickly|overfits; "
        "degrades on out-of-domain data|fails out of domain; is sensitive to the learning rate|needs careful LR tuning; "
        "needs far more data|is data hungry"
    ),
    "cause_r": (
        "a learning rate that is too high|an aggressive LR; corrupted data shards|bad shards; "
        "mixed precision overflow|fp16 overflow; a tokenizer mismatch|the wrong tokenizer; "
        "a bug in the eval script|an evaluation bug; exploding gradients|gradient blowup; "
        "a preempted node|a lost GPU node"
    ),
    "venue": "NeurIPS; ICML; ACL; EMNLP; ICLR; SIGIR; arXiv; KDD; CIKM; NAACL",
    "lr": "3e-4; 1e-4; 5e-5; 1e-3; 2e-5; 6e-4",
    "branch": "main; dev; exp/long-context; feature/reranker; exp/distill; wip/eval-fixes",
    # errands
    "item": (
        "milk; eggs; coffee beans; dog food; printer ink; batteries; paper towels; bread; olive oil; vitamins; "
        "light bulbs; laundry detergent|washing powder; shampoo; a birthday card; wrapping paper; "
        "a phone charger|a charging cable; sunscreen; cat litter; rice; tomatoes; oat milk; trash bags|bin liners; "
        "toothpaste; dish soap; bananas; a water filter; stamps; a notebook"
    ),
    "store": (
        "Trader Joe's|the grocery store; Costco|the warehouse store; the pharmacy|the drugstore; "
        "Home Depot|the hardware store; the farmers market|the market; Target|the big-box store; "
        "the corner shop|the local shop; IKEA|the furniture store; the post office|the mail counter; "
        "the dry cleaner|the cleaners; Whole Foods|the organic grocer; the bakery|the bread shop"
    ),
    "appt": (
        "dentist appointment|dental checkup; haircut|barber visit; doctor's appointment|GP visit; "
        "vet visit|the dog's checkup; car service|oil change; parent-teacher meeting|school conference; "
        "physiotherapy session|physio; eye exam|optometrist visit; meeting with the tax advisor|accountant visit; "
        "yoga class|yoga session; piano lesson|music lesson"
    ),
    "relation": (
        "partner|spouse; neighbor|next-door neighbor; best friend|close friend; cousin|relative; "
        "sibling|brother or sister; colleague|coworker; landlord|property owner; babysitter|sitter; "
        "in-law|family member; roommate|flatmate"
    ),
    "chore": (
        "pay the electricity bill|settle the power bill; renew the car insurance|extend the auto policy; "
        "return the library books|drop off the borrowed books; fix the leaking faucet|repair the dripping tap; "
        "book the plumber|get a plumber in; cancel the gym membership|end the gym contract; "
        "renew the passport|get a new passport; pick up the dry cleaning|collect the laundry; "
        "file the tax return|submit taxes; water the plants|tend the plants; "
        "register the car|do the vehicle registration; service the boiler|get the heating checked"
    ),
    "gift": (
        "a cookbook; a scarf; concert tickets; a plant; a board game; headphones; a watch; flowers; "
        "a photo book; a spa voucher; a bottle of wine; a puzzle"
    ),
    "pref": (
        "is allergic to peanuts|has a peanut allergy; is vegetarian|does not eat meat; "
        "prefers aisle seats|likes sitting on the aisle; hates early meetings|is not a morning person; "
        "drinks oat milk|avoids cow milk; is lactose intolerant|cannot have dairy; "
        "likes Italian food|loves pasta places; runs on weekends|jogs every weekend; "
        "does not drink coffee after noon|skips afternoon caffeine; is gluten free|avoids wheat"
    ),
    "folder": "Household; Receipts; Taxes; Home; Admin; Insurance; Car",
    "restaurant": (
        "Luigi's; The Green Fork; Sakura Sushi; Casa Lola; The Oak Room; Nonna's; Spice Route; "
        "Blue Door Bistro; Le Petit Zinc; Golden Dragon"
    ),
    "event": (
        "a team offsite|a work retreat; a school play|the kids' show; a work trip|business travel; "
        "a client dinner|a customer meal; a flight|travel"
    ),
    "card": "Visa; Amex; debit; joint account; Mastercard",
    "day_ordinal": "1st; 5th; 10th; 15th; 20th; 25th; 28th",
    # travel
    "airline": (
        "Lufthansa; KLM; Delta; United; Emirates; Singapore Airlines; Air France; British Airways; ANA; TAP; "
        "Iberia; Qantas; JetBlue; Turkish Airlines"
    ),
    "hotel": (
        "the Marriott|Marriott; the Hilton|Hilton; an Airbnb|a rental apartment; the Ibis|Ibis; "
        "the Hyatt|Hyatt; the Novotel|Novotel; the Sheraton|Sheraton; "
        "a boutique hotel near the station|a small hotel by the station; the Radisson|Radisson"
    ),
    "seat": (
        "aisle seat|aisle; window seat|window; exit row|extra legroom; premium economy|premium; business class|business"
    ),
    "purpose": (
        "customer visit|client meeting; conference|summit; offsite|team retreat; training|workshop; "
        "trade show|expo; board meeting|board session; hiring event|recruiting day"
    ),
    "transport": ("train|rail; taxi|cab; rental car|hire car; airport shuttle|shuttle bus; metro|subway; ferry|boat"),
    "doc_t": (
        "visa|entry permit; passport|travel document; ESTA|travel authorization; "
        "travel insurance|insurance cover; vaccination record|vaccine certificate"
    ),
    "weather": "rainy; sunny; snowy; stormy; hot; cold; foggy; mild",
    # finance
    "category": (
        "software subscriptions|SaaS; cloud hosting|infrastructure; travel|trips; office supplies|supplies; "
        "marketing|ads; contractors|freelancers; payroll|salaries; legal fees|lawyers; hardware|laptops; "
        "training|education; catering|food; recruiting|hiring"
    ),
    "account": (
        "operating account|main account; savings account|reserve account; corporate card|company card; "
        "payroll account|salary account; petty cash|cash box"
    ),
    "quarter": "Q1; Q2; Q3; Q4",
    "fin_metric": (
        "burn rate|monthly burn; runway|cash runway; gross margin|margin; ARR|annual recurring revenue; "
        "churn|customer churn; CAC|acquisition cost; DSO|days sales outstanding; EBITDA|operating profit; "
        "cash balance|cash on hand"
    ),
    "doc_f": (
        "bank statements|account statements; the fixed asset register|the asset list; payroll reports|salary reports; "
        "vendor contracts|supplier agreements; revenue recognition memos|rev rec notes; "
        "expense policies|spending rules"
    ),
    # shared
    "time": (
        "10am|10:00; 3pm|15:00; 9am|09:00; 2pm|14:00; 11am|11:00; 4pm|16:00; noon|midday; 1pm|13:00; "
        "9:30am|09:30; 5pm|17:00; 10:30am|10:30; 2:30pm|14:30; 8am|08:00; 6pm|18:00; 4:30pm|16:30; "
        "11:15am|11:15; 7pm|19:00; 3:45pm|15:45; 8:15am|08:15; 7:30am|07:30"
    ),
    "dur": (
        "20 minutes|twenty minutes; 15 minutes|a quarter hour; 30 minutes|half an hour; an hour|60 minutes; "
        "45 minutes|three quarters of an hour; 10 minutes|ten minutes; 2 hours|two hours; 90 minutes|an hour and a half; "
        "5 minutes|five minutes; 3 hours|three hours; half a day|four hours; 2 days|two days"
    ),
    "prio": "P2; P3; P1; P4",
    "weekday": "Tuesday; Monday; Thursday; Wednesday; Friday; Saturday; Sunday",
}


def _split_words(text: str, sep: str | None = None) -> tuple[str, ...]:
    """The items of a space- (or `sep`-) separated list."""
    return tuple(text.split(sep))


FIRST_NAMES = _split_words(
    "Maria James Wei Priya Ahmed Sofia Lucas Emma Olivia Noah Liam Ava Mia Yuki Hiro Fatima Omar Ana Diego "
    "Carlos Elena Ivan Olga Lena Jonas Lars Ingrid Sven Amara Kwame Zanele Thabo Aisha Ravi Arjun Deepa Anil "
    "Meera Kenji Sakura Tom Sarah David Rachel Michael Laura Daniel Julia Kevin Nina Peter Grace Sam Alex Chris "
    "Jordan Taylor Morgan Casey Riley Jamie Robin Leo Hugo Chloe Zoe Isla Finn Oscar Felix Clara Marta Pablo "
    "Lucia Mateo Valentina Camila Gabriel Rafael Beatriz Joao Ines Tiago Nadia Yusuf Leila Karim Samir Tariq "
    "Hana Noor Dmitri Katya Pavel Anya Boris Tomasz Zofia Piotr Agnieszka Jan Eva Petra Klaus Heidi Anke Matteo "
    "Giulia Luca Chiara Marco Francesca Paolo Elif Mehmet Ayse Emre Linh Minh Thanh Quang Siti Budi Rizal Dewi "
    "Kofi Abena Chidi Ngozi Femi Tunde Ben Hannah Ethan Lily Ryan Nora Adam Ruth Owen Iris Victor Alice Henry "
    "Maya Simon Ella Mark Rosa Paul Vera Dan Ida"
)
LAST_NAMES = _split_words(
    "Lopez Chen Patel Kim Nguyen Smith Garcia Okafor Silva Rossi Novak Kowalski Johansson Andersen Tanaka Sato "
    "Suzuki Singh Kumar Sharma Ali Hassan Khan Ivanova Petrov Schmidt Weber Fischer Dubois Martin Bernard Moreau "
    "Costa Santos Oliveira Ferreira Park Lee Choi Wang Li Zhang Liu Yang Huang Brown Jones Miller Davis Wilson "
    "Taylor Clark Lewis Walker Hall Young King Wright Scott Green Baker Adams Nelson Carter Mitchell Roberts "
    "Turner Phillips Campbell Parker Evans Edwards Collins Stewart Morris Murphy Cook Rogers Reed Bailey Cooper "
    "Richardson Cox Howard Ward Torres Peterson Gray Ramirez Watson Brooks Kelly Sanders Price Bennett Wood "
    "Barnes Ross Henderson Coleman Jenkins Perry Powell Long Patterson Hughes Flores Butler Simmons Foster "
    "Bryant Russell Griffin Diaz Hayes Mensah Boateng Adeyemi Eze Mwangi Otieno Haddad Nasser Yilmaz Demir "
    "Kaya Tran Pham Hoang Yamamoto Nakamura Kobayashi Ito Watanabe Larsen Berg Lindqvist Virtanen Horvat "
    "Popescu Dimitrov Papadopoulos Murray Quinn Doyle Byrne"
)
COMPANY_HEADS = _split_words(
    "Blue North Bright Silver Red Green Iron Stone River Cloud Star Sun Oak Pine Cedar Maple Summit Peak Harbor "
    "Bay Lake Ocean Coral Amber Golden Crystal Swift Rapid Quantum Nova Apex Vertex Zenith Orbit Pixel Data "
    "Signal Echo Falcon Eagle Hawk Wolf Fox Bear Lion Tiger Atlas Titan Polar Arctic Desert Prairie Meadow "
    "Willow Birch Aspen Granite Copper Cobalt Indigo Velvet Lumen Terra Aero Hydro Solar Lunar Vivid Clear"
)
COMPANY_TAILS = _split_words(
    "wave point ridge field stone light works forge line path gate bridge worth wood ford haven crest view "
    "mark port dale side spring star brook leaf rock"
)
COMPANY_KINDS = _split_words(
    "Labs Systems Logistics Health Foods Capital Analytics Retail Media Energy Robotics Bank Group Partners "
    "Insurance Pharma Motors Studios Networks Realty"
)
PRODUCT_WORDS = _split_words(
    "Pay Cloud Insights Connect Studio Vault Pulse Flow Hub Sync Lens Forge Beacon Relay Ledger Nimbus Spark "
    "Shield Desk Notes Track Mail Chat Drive"
)
SERVICES = (
    "billing-api|billing service; auth-service|login service; checkout|checkout flow; "
    "search-indexer|search indexing; payments-gateway|payment gateway; user-service|user accounts backend; "
    "notification-worker|notifications; api-gateway|edge API; inventory-api|stock service; "
    "reporting-etl|reporting jobs; web-frontend|website; mobile-backend|app backend; ledger-service|ledger; "
    "email-sender|outbound mail; image-resizer|thumbnail service; recommendation-engine|recommendations; "
    "session-store|session service; rate-limiter|throttling service; feature-flags|flag service; "
    "audit-log|audit trail service; order-service|orders backend; shipping-api|shipping service; "
    "pricing-engine|pricing service; webhook-dispatcher|webhook sender; analytics-pipeline|analytics jobs; "
    "scheduler|job scheduler; ml-inference|model serving; pdf-renderer|PDF service; geo-lookup|location service"
)
HOST_PREFIXES = _split_words("shop api status docs admin grafana vpn mail staging app portal cdn auth pay")
PROJECT_NAMES = _split_words(
    "Falcon Aurora Borealis Cobalt Daybreak Ember Fjord Glacier Halcyon Ibis Juniper Kestrel Lumen Monsoon "
    "Nimbus Onyx Pegasus Quasar Raven Sierra Tundra Umbra Vesper Wren Zephyr Atlas Beacon Cascade Delta "
    "Everest Fable Granite Harbor Indigo Jasper"
)
CITIES = _split_words(
    "Lisbon; Berlin; Tokyo; Singapore; New York; San Francisco; London; Paris; Madrid; Barcelona; Amsterdam; "
    "Dublin; Toronto; Chicago; Austin; Seattle; Boston; Denver; Mexico City; Sao Paulo; Buenos Aires; Nairobi; "
    "Lagos; Cape Town; Cairo; Dubai; Istanbul; Mumbai; Bangalore; Delhi; Seoul; Shanghai; Hong Kong; Sydney; "
    "Melbourne; Auckland; Vienna; Prague; Warsaw; Zurich; Geneva; Milan; Rome; Copenhagen; Stockholm; Oslo; "
    "Helsinki; Brussels; Munich; Hamburg; Edinburgh; Manchester; Montreal; Vancouver; Miami; Atlanta; "
    "Los Angeles; Honolulu; Bangkok; Jakarta; Manila; Hanoi; Kuala Lumpur; Tel Aviv; Athens; Reykjavik; Lima; "
    "Bogota; Santiago; Accra; Kigali; Casablanca; Doha; Osaka; Kyoto; Taipei; Porto; Seville; Valencia; Lyon",
    "; ",
)
AIRLINE_CODES = {
    "Lufthansa": "LH",
    "KLM": "KL",
    "Delta": "DL",
    "United": "UA",
    "Emirates": "EK",
    "Singapore Airlines": "SQ",
    "Air France": "AF",
    "British Airways": "BA",
    "ANA": "NH",
    "TAP": "TP",
    "Iberia": "IB",
    "Qantas": "QF",
    "JetBlue": "B6",
    "Turkish Airlines": "TK",
}
TOPIC_TAGS: dict[str, tuple[str, ...]] = {
    "devops": ("incident", "deploy", "infra", "oncall", "postmortem", "k8s", "database", "monitoring", "security"),
    "support": ("customer", "ticket", "billing", "bug", "escalation", "refund", "onboarding", "feedback"),
    "sales": ("deal", "pipeline", "prospect", "demo", "renewal", "pricing", "crm", "competitor"),
    "research": ("experiment", "paper", "eval", "dataset", "idea", "baseline", "reading", "results"),
    "errands": ("home", "shopping", "family", "health", "bills", "errand", "gift", "appointment"),
    "travel": ("trip", "flight", "hotel", "visa", "itinerary", "expenses", "conference"),
    "finance": ("invoice", "budget", "expenses", "vendor", "payroll", "reporting", "audit", "cash"),
}
TYPE_TAGS: dict[str, tuple[str, ...]] = {
    "todo": ("followup", "urgent", "this-week"),
    "skill": ("howto", "runbook", "process"),
    "reflection": ("lesson", "pattern", "retro"),
    "intent": ("trigger", "reminder"),
    "scratch": ("draft", "wip"),
    "info": ("fact", "preference", "reference"),
    "episode": ("log", "update", "meeting"),
}

#: Entity kinds: the canonical value of a slot of these kinds is listed in ``entities``.
ENTITY_KINDS = frozenset(
    {
        "person",
        "first",
        "doctor",
        "customer",
        "supplier",
        "competitor",
        "product",
        "service",
        "host",
        "project",
        "city",
        "inc",
        "sup",
        "exp",
        "invoice",
        "version",
        "newversion",
        "flight",
        "dataset",
        "airline",
        "tool",
        "restaurant",
        "region",
        "venue",
    }
)

# ---------------------------------------------------------------------------------------------
# Templates: "content || question || title". Slots are {kind}, {kind#2} for a second distinct
# value, and {kind~} (questions only) for a paraphrase of the value. Scratch notes have no question.
# ---------------------------------------------------------------------------------------------

TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "devops": {
        "info": (
            "{service} reads from the {component} in {region}; failover is manual and documented in the runbook."
            " || How does the {service~} fail over if the {component~} in {region~} goes down? || {service} failover",
            "{person} owns the {component} for {service}; page them before touching it."
            " || Who is responsible for the {component~} behind {service~}? || {component} owner",
            "Alerts for {metric} on {service} fire at {pct} and route to {tool}."
            " || What threshold triggers the {metric~} alarm for {service~}? || {service} alerting",
            "{service} in {env} is pinned to {version} until {person} signs off on the upgrade."
            " || Which release is the {env~} {service~} locked to? || {service} version pin",
            "Backups of the {component} for {service} run nightly at {time} and are kept for {num} days."
            " || When does the {component~} backup for {service~} happen? || {service} backups",
            "{host} is served by {service} behind the {component} in {region}."
            " || Which backend handles traffic for {host}? || {host}",
            "The {component} for {service} in {env} is sized for {num}k requests per second; beyond that we shed load."
            " || How much traffic can the {env~} {component~} of {service~} take? || {service} capacity",
        ),
        "episode": (
            "Deployed {newversion} of {service} to {region} after {inc}; rollback plan is in the runbook."
            " || Which {service~} release went out to {region~} following {inc}? || {service} {newversion} deploy",
            "{inc}: {symptom} on {service} in {region} caused by {cause}; {action} the {component} and it"
            " recovered in {dur}. || What caused the {symptom~} on {service~} during {inc}? || {inc}",
            "Paged at {time} for {symptom} on {service}; {person} {action} the {component} and closed {inc}."
            " || Who handled the {symptom~} page for {service~}? || page: {service}",
            "Rolled back {service} from {version} after {metric} jumped to {pct} in {env}."
            " || Why was {service~} reverted on {env~}? || {service} rollback",
            "Postmortem for {inc} with {person}: root cause was {cause}."
            " || What was the root cause found in the {inc} review? || {inc} postmortem",
            "Migrated the {component} for {service} to {region} over the weekend; {symptom} stopped."
            " || Where was the {component~} of {service~} moved to? || {component} migration",
            "Load test on {service} in {env}: {metric} held up to {num}k requests per second, then {symptom}."
            " || How did {service~} behave under the {env~} load test? || {service} load test",
        ),
        "todo": (
            "TODO: renew the TLS certificate for {host} before {date}."
            " || By when does the cert for {host} need renewing? || renew cert {host}",
            "TODO: add an alert on {metric} for {service} after {inc}."
            " || Which alert still has to be set up for {service~} after {inc}? || alert for {service}",
            "Need to upgrade the {component} in {env} for {service} by {weekday}."
            " || What {env~} upgrade is due for {service~}? || {component} upgrade",
            "Follow up with {person} on {cause} behind {inc}."
            " || Who should I check with about {inc}? || {inc} follow-up",
            "TODO: write the postmortem for {inc} and share it with {person} by {date}."
            " || When is the {inc} write-up due?",
        ),
        "skill": (
            "To fix {symptom} on {service}: check {metric} in {tool}, then {fix} the {component}."
            " || How do I deal with {symptom~} on {service~}? || fixing {symptom}",
            "Runbook for {component} failover in {region}: promote the replica, update DNS, then verify {metric}"
            " in {tool}. || What are the steps to fail over the {component~} in {region~}? || failover runbook",
            "To deploy {service} safely, ship to canary first, watch {metric} for {dur}, then promote."
            " || What's the safe rollout procedure for {service~}? || deploying {service}",
        ),
        "intent": (
            "If {metric} on {service} goes above {pct} again, page {person} and open an incident."
            " || What should happen when {service~} {metric~} breaches its limit?",
            "When {inc} is closed, remove the temporary {component} override in {env}."
            " || What cleanup is pending once {inc} is resolved?",
        ),
        "reflection": (
            "Pattern: most {service} incidents follow deploys on {weekday}; {cause} shows up repeatedly."
            " || Is there a recurring trend in {service~} outages? || {service} incident pattern",
            "Lesson from {inc}: alerts on {metric} fired too late; we need earlier warnings."
            " || What did we learn from {inc}? || lessons from {inc}",
        ),
        "scratch": (
            "checking {metric} on {service} in {env}... {symptom} again? maybe {cause}",
            "grep logs for {inc}, compare {version} against the previous build, ask {person}",
        ),
    },
    "support": {
        "info": (
            "{first} from {customer} prefers {channel} over {channel#2} for {subject} questions."
            " || How does {first} at {customer} like to be contacted about {subject~}? || {first} contact preference",
            "{customer} is on the {plan} plan with {num} seats; renewal is due on {date}."
            " || When does {customer} renew and which tier are they on? || {customer} plan",
            "{customer} uses {feature} heavily; {first} is their admin."
            " || Who administers the {customer} account that relies on {feature~}? || {customer} admin",
            "Known issue: {issue} in {product} affects {plan} customers; workaround is in {sup}."
            " || Is there a workaround for {issue~} in {product}? || known issue",
            "{first} at {customer} is usually {sentiment} and expects replies within {dur}."
            " || How fast should we answer {first} from {customer}? || {first} at {customer}",
            "{customer} requested {feature} for {product}; tracked as {sup}."
            " || Which feature did {customer} ask for in {product}? || {customer} feature request",
        ),
        "episode": (
            "{first} from {customer} reported {issue} via {channel}; opened {sup}."
            " || Which ticket covers the {issue~} complaint from {customer}? || {sup}",
            "Resolved {sup} for {customer}: {issue} was caused by {cause_s}; {first} confirmed it works."
            " || How was the {issue~} problem at {customer} fixed? || {sup} resolved",
            "Call with {first} ({customer}) at {time}: they were {sentiment} about {issue}; promised an update {when}."
            " || What did I promise {first} from {customer} after the call about {issue~}? || call with {first}",
            "Escalated {sup} from {customer} to engineering; {issue} reproduced on {product} {version}."
            " || Which {product} build shows the {issue~} bug for {customer}? || escalation {sup}",
            "Issued a refund of {money} to {customer} for {issue}; approved by {person}."
            " || How much money went back to {customer} over {issue~}? || refund {customer}",
            "Flagged {customer} as a churn risk: {num} tickets about {issue} this month."
            " || Is {customer} at risk of leaving because of {issue~}? || churn risk",
        ),
        "todo": (
            "TODO: reply to {first} at {customer} about {sup} by {weekday}."
            " || When do I owe {first} an answer on {sup}? || reply to {first}",
            "TODO: send {customer} the {feature} setup guide before {date}."
            " || What documentation should go to {customer} about {feature~}?",
            "Check whether the fix for {issue} shipped in {product} {version} and tell {first}."
            " || Do I need to update {first} about a fix for {issue~}?",
            "TODO: walk {first} from {customer} through {feature}; reach out by {channel}."
            " || What walkthrough of {feature~} is planned with {customer}? || walkthrough {customer}",
        ),
        "skill": (
            "For {issue}: ask for a screenshot, check the account in the admin panel, then clear the session."
            " || What's the standard procedure for {issue~} tickets? || handling {issue}",
            "To issue a refund over {money}, get approval from {person} and note it on the ticket."
            " || Who signs off on refunds above {money}? || refund policy",
            "To enable {feature} for {plan} customers, toggle it in the admin panel and notify the account owner."
            " || How do I turn on {feature~} for {plan~} accounts? || enabling {feature}",
        ),
        "intent": (
            "If {customer} opens another ticket about {issue}, loop in {person} immediately."
            " || What should happen if {customer} complains about {issue~} again?",
            "When {sup} is fixed, email {first} at {customer}. || Who needs to hear when {sup} gets resolved?",
        ),
        "reflection": (
            "Customers on the {plan} plan report {issue} far more often than others."
            " || Which tier sees {issue~} most? || {issue} by plan",
            "{customer} tickets tend to spike after our releases; {first} escalates quickly."
            " || Does {customer} escalate more after releases? || {customer} pattern",
        ),
        "scratch": (
            "draft reply to {first}: sorry about {issue}, fix in progress, eta {when}",
            "{sup} - repro steps? {product} {version}, {plan} plan, ask {first} for logs",
        ),
    },
    "sales": {
        "info": (
            "{first} is the {role} at {customer} and the final decision maker on the {product} deal."
            " || Who signs off on buying {product} at {customer}? || {customer} decision maker",
            "{customer} budget for {product} is around {money} per year; their fiscal year ends in {month}."
            " || How much can {customer} spend on {product}? || {customer} budget",
            "{customer} currently uses {competitor} and their contract ends in {month}."
            " || Which vendor does {customer} rely on today? || {customer} incumbent",
            "Main objection from {customer} on {product} is {objection}."
            " || What is holding {customer} back on {product}? || {customer} objection",
            "{first} at {customer} prefers meetings {daypart}, never on {weekday}."
            " || When is a good time to meet {first} from {customer}? || meeting {first}",
        ),
        "episode": (
            "Demo of {product} for {customer} on {weekday}: {first} liked {feature} but worried about {objection}."
            " || What did {customer} think of the {product} demo? || {customer} demo",
            "Moved {customer} to {stage} after a call with {first}; deal size {money}."
            " || What stage is the {customer} deal in after talking to {first}? || {customer} stage",
            "Lost {customer} to {competitor} on {objection}; {first} said they may revisit in {month}."
            " || Why did we lose {customer} to {competitor}? || {customer} lost",
            "Sent {customer} a proposal for {num} seats of {product} at {money}."
            " || What pricing did we quote {customer} for {product}? || {customer} proposal",
            "Met {first} ({role}, {customer}) in {city}; they want a pilot of {product} by {date}."
            " || Where did I meet the {role~} from {customer}? || met {first}",
            "{customer} signed for {product}: {money}, {num}-year term, closed by {person}."
            " || Who closed the {customer} contract for {product}? || {customer} signed",
        ),
        "todo": (
            "TODO: {next_step} for {customer} by {weekday}."
            " || What's the next action on {customer} this week? || next step {customer}",
            "TODO: send {first} at {customer} the {doc} before {date}."
            " || Which document does {first} from {customer} need? || send {doc}",
            "Follow up with {first} from {customer} on {objection} {when}."
            " || When should I chase {customer} about {objection~}?",
            "Update the CRM with the {customer} {stage} notes from {weekday}."
            " || Which CRM entry for {customer} is pending?",
        ),
        "skill": (
            "When a prospect raises {objection}, share the {doc} and offer a call with {person}."
            " || How do I handle {objection~} pushback? || handling {objection}",
            "Discount approvals above {pct} need sign-off from {person}."
            " || Who approves discounts larger than {pct}? || discount policy",
            "Qualifying {plan} leads: confirm budget, authority, need and timing before booking a demo."
            " || How do I qualify {plan~} prospects? || qualification",
        ),
        "intent": (
            "If {customer} mentions {competitor} again, send the comparison sheet."
            " || What do I do if {customer} brings up {competitor}?",
            "When {first} returns from leave, restart the {product} conversation with {customer}."
            " || What should happen when {first} is back at {customer}?",
        ),
        "reflection": (
            "Deals stall at {stage} when {objection} comes up late; raise it in discovery."
            " || Where do deals get stuck over {objection~}? || deal pattern",
            "{competitor} keeps winning on {objection}; we need a better answer."
            " || Why do we lose to {competitor}? || {competitor} wins",
        ),
        "scratch": (
            "{customer}: {num} seats? around {money}? ask {first} about the {stage} timeline",
            "notes on {first}, {role} at {customer}, likes {feature}, hates {objection}",
        ),
    },
    "research": {
        "info": (
            "{person} et al. ({venue} {year}) show that {method} {finding} on {dataset}."
            " || Which paper found that {method~} {finding~}? || {person} {year}",
            "Baseline {metric_r} on {dataset} is {score}; the target for {project} is {score#2}."
            " || What score is {project} aiming for on {dataset}? || {project} targets",
            "In our {project} experiments, {method} {finding}."
            " || How did {method~} do in {project}? || {method} in {project}",
            "{dataset} has a license that forbids commercial use; {person} checked with legal."
            " || Can we use {dataset} in a commercial product? || {dataset} license",
            "GPU budget for {project} is {num} A100-hours per week; {person} approves anything extra."
            " || How much compute does {project} get? || {project} compute",
            "{person} maintains the {dataset} loader; it lives in the {project} repo."
            " || Who looks after the {dataset} loading code? || {dataset} loader",
        ),
        "episode": (
            "Ran {method} on {dataset}: {metric_r} went from {score} to {score#2}."
            " || What did {method~} do to {metric_r~} on {dataset}? || {method} run",
            "Reading group on {weekday}: discussed {person} et al. on {method}; consensus was it {finding}."
            " || What did the reading group conclude about {method~}? || reading group",
            "Experiment {exp} crashed after {dur} with NaN loss; suspect {cause_r}."
            " || Why did run {exp} fail? || {exp} crash",
            "Submitted the {project} paper to {venue}; {person} is handling the rebuttal."
            " || Where was the {project} paper sent? || {project} submission",
            "Reproduced the {dataset} result from {person}'s paper within {pct}."
            " || Did we manage to replicate {person}'s {dataset} numbers? || {dataset} repro",
            "Switched {project} from {method} to {method#2} after {exp} underperformed."
            " || What approach replaced {method~} in {project}? || {project} pivot",
        ),
        "todo": (
            "TODO: rerun {exp} with {num} seeds before the {venue} deadline on {date}."
            " || How many seeds should {exp} be rerun with? || rerun {exp}",
            "TODO: read {person} et al. on {method} before {weekday}."
            " || Which paper on {method~} is on my reading list?",
            "Ask {person} for access to {dataset} for {project}. || Who can grant {project} access to {dataset}?",
            "TODO: write the related-work section on {method} for {project}."
            " || Which part of the {project} paper about {method~} is still pending?",
        ),
        "skill": (
            "To evaluate on {dataset}: freeze the checkpoint, run the eval script with {num} seeds and report the mean"
            " and spread of {metric_r}. || What's the protocol for scoring on {dataset}? || eval protocol",
            "When {method} diverges, lower the learning rate by {num}x and enable gradient clipping."
            " || How do I stabilize {method~} training? || stabilizing {method}",
            "To launch a sweep for {project}, edit the config, then submit through the cluster queue with {num} GPUs."
            " || How are sweeps for {project} started? || {project} sweeps",
        ),
        "intent": (
            "If {exp} beats {score} on {metric_r}, tell {person} and freeze the checkpoint."
            " || What happens if {exp} does well on {metric_r~}?",
            "When the new {dataset} release is out, rerun all {project} baselines."
            " || What should follow a new {dataset} release for {project}?",
        ),
        "reflection": (
            "Across experiments, {method} {finding}; worth trying {method#2} next."
            " || What have we learned overall about {method~}? || {method} takeaways",
            "{project} keeps slipping because evals on {dataset} take too long."
            " || Why is {project} behind schedule? || {project} delays",
        ),
        "scratch": (
            "idea: combine {method} and {method#2} for {dataset}?? check {metric_r} first",
            "{exp}: lr {lr}, batch {num}, {metric_r} {score}, branch {branch}",
        ),
    },
    "errands": {
        "info": (
            "The user's {relation} {first} {pref}."
            " || What should I know about {first}, the user's {relation~}? || {first}",
            "{first}'s birthday is on {date}; last year we got them {gift}."
            " || When is {first}'s birthday? || {first} birthday",
            "The user's {appt} is usually with {doctor} at {time}."
            " || Which practitioner handles the user's {appt~}? || {appt}",
            "The user buys {item} at {store} every {weekday}."
            " || Where does the user usually get {item~}? || shopping habits",
            "The deadline to {chore} is the {day_ordinal} of each month; autopay is off."
            " || What day each month must the user {chore~}? || monthly chore",
            "The spare house key is with {first}, the user's {relation}."
            " || Does {first} have the spare key? || spare key",
        ),
        "episode": (
            "Booked the {appt} for {weekday} at {time} with {doctor}."
            " || When is the user's {appt~} with {doctor}? || {appt} booked",
            "Picked up {item} and {item#2} at {store}; spent {money}."
            " || What was bought at {store~} along with {item~}? || shopping",
            "Called {store} about the missing order; a refund of {money} was promised {when}."
            " || What did {store~} say about the missing order? || missing order",
            "Sent {gift} to {first} ({relation}) for their birthday; it arrives {when}."
            " || What present went to {first}? || gift for {first}",
            "Rescheduled the {appt} from {weekday} to {weekday#2} because of {event}."
            " || Why was the {appt~} moved off {weekday}? || {appt} moved",
            "Done: {chore}; confirmation number {conf}. || Has the user managed to {chore~}? || done",
        ),
        "todo": (
            "TODO: {chore} before {date}. || By when does the user need to {chore~}? || {chore}",
            "TODO: buy {item} at {store} on the way home. || What needs to be picked up from {store~}?",
            "Remind the user to call {first} ({relation}) on {weekday}."
            " || Who should the user phone on {weekday}? || call {first}",
            "TODO: book the next {appt} for the coming week, ideally {daypart}."
            " || When would the user like the next {appt~}? || book {appt}",
        ),
        "skill": (
            "To reorder {item}, use the saved cart at {store} and pick same-day delivery."
            " || How do I reorder {item~}? || reordering {item}",
            "To book the {appt}, call the clinic before {time}; online booking is unreliable."
            " || What's the best way to schedule the {appt~}? || booking {appt}",
            "Bills: pay from the {card} card and file receipts in the {folder} folder."
            " || Where do receipts paid with the {card} card go? || bills",
        ),
        "intent": (
            "If the {appt} gets cancelled again, switch to {doctor}."
            " || What's the backup plan if the {appt~} falls through?",
            "When {first} confirms dinner, book a table for {num} at {restaurant}."
            " || What should I do once {first} confirms dinner?",
        ),
        "reflection": (
            "The user tends to postpone the {appt} when work gets busy; book it early in the month."
            " || Does the user often reschedule the {appt~}? || {appt} habit",
            "Grocery runs to {store} cluster on {weekday}; batching errands saves time."
            " || What day does the user usually go to {store~}? || errand pattern",
        ),
        "scratch": (
            "list for {store}: {item}, {item#2}, maybe {item#3}, and check the price",
            "call {store} about the order, ask for {first}, reference {conf}",
        ),
    },
    "travel": {
        "info": (
            "{first} always asks for the {seat} and flies {airline} when possible."
            " || What are {first}'s flight preferences? || {first} travel prefs",
            "For {city} trips, book {hotel} near the office; corporate rate code {code}."
            " || Where do we usually stay in {city}? || {city} hotel",
            "Travel policy: flights over {num} hours can be booked in {seat}."
            " || When is {seat~} allowed? || travel policy",
            "{first} needs a valid {doc_t} for {city}; the current one expires on {date}."
            " || Does {first} need any paperwork for {city}? || {first} documents",
            "From {city} airport, the {transport} to downtown takes about {dur}."
            " || How long is the ride into {city} by {transport~}? || {city} transfer",
        ),
        "episode": (
            "Booked {airline} {flight} to {city} for {first} on {date}, {seat}."
            " || Which flight is {first} taking to {city}? || flight to {city}",
            "{flight} to {city} was delayed {dur}; rebooked {first} on the next departure."
            " || What happened with {first}'s flight to {city}? || {flight} delay",
            "Checked {first} into {hotel} in {city} for the {purpose}; confirmation {conf}."
            " || Where is {first} staying in {city}? || {city} hotel",
            "Cancelled the {city} trip for the {purpose}; a refund of {money} is expected {when}."
            " || Why was the {city} trip called off? || {city} trip cancelled",
            "{first} landed in {city} at {time}; {transport} booked to the {purpose}."
            " || How is {first} getting from the {city} airport? || {first} arrival",
            "Submitted expenses for the {city} {purpose}: {money} total."
            " || How much did the {city} {purpose~} trip cost? || {city} expenses",
        ),
        "todo": (
            "TODO: book flights to {city} for the {purpose} on {date}."
            " || Which {purpose~} trip still needs flights? || flights to {city}",
            "TODO: renew {first}'s {doc_t} before the {city} trip. || What must {first} renew before going to {city}?",
            "Find a hotel in {city} under {money} a night for {num} nights. || What's the hotel budget for {city}?",
            "TODO: arrange the {transport} from {city} airport for {first} on {weekday}."
            " || What ground transport is needed for {first} in {city}? || {city} transfer",
        ),
        "skill": (
            "To rebook a missed {airline} connection, use the app first; the phone line takes {dur}."
            " || Fastest way to fix a missed {airline} connection? || {airline} rebooking",
            "Visa for {city}: apply online {num} weeks ahead with an invitation letter from {customer}."
            " || How early should the {city} visa be requested? || {city} visa",
            "Book {city} hotels through the corporate portal to get the {pct} discount."
            " || How do I get the discount on {city} hotels? || {city} hotels",
        ),
        "intent": (
            "If {flight} is cancelled, book {first} on the {transport} instead."
            " || What's the fallback if {flight} gets cancelled?",
            "When the {purpose} dates for {city} are confirmed, hold {num} rooms at {hotel}."
            " || What should happen once the {city} {purpose~} is confirmed?",
        ),
        "reflection": (
            "{airline} flights to {city} are late more often than not; allow {dur} of buffer."
            " || How reliable is {airline} to {city}? || {airline} delays",
            "{first} travels to {city} about every {num} weeks; a standing hotel booking would save money."
            " || How often does {first} go to {city}? || {first} travel pattern",
        ),
        "scratch": (
            "{city} trip: {airline}? {hotel}? budget {money}, check with {first}",
            "options for {first}: {flight} at {time} or the later one, {seat} if possible",
        ),
    },
    "finance": {
        "info": (
            "{supplier} invoices are due net {num}; send them to {first} in accounts payable."
            " || What are the payment terms with {supplier}? || {supplier} terms",
            "{category} budget for {quarter} is {money}; {pct} already spent."
            " || How much is left for {category~} in {quarter}? || {category} budget",
            "The {account} ending {last4} is used for {category}. || Which account pays for {category~}? || {account}",
            "{fin_metric} was {money} at the end of {month}."
            " || What was the {fin_metric~} in {month}? || {fin_metric} {month}",
            "{first} approves any spend over {money} for {category}."
            " || Who signs off on large {category~} purchases? || approvals",
        ),
        "episode": (
            "Paid {invoice} from {supplier} for {money} via the {account}."
            " || How was the {supplier} invoice {invoice} settled? || paid {invoice}",
            "Flagged a duplicate charge of {money} from {supplier} on the {account}; disputed it with the bank."
            " || What did we dispute with {supplier}? || dispute {supplier}",
            "Closed the books for {month}: {fin_metric} at {money}, {pct} above plan."
            " || How did {month} close on {fin_metric~}? || {month} close",
            "Renegotiated the {supplier} contract: saving {money} a year on {category}."
            " || How much did the {supplier} renegotiation save? || {supplier} contract",
            "Reimbursed {first} {money} for {category} expenses from the {city} trip."
            " || What was {first} paid back for after {city}? || reimbursement",
            "Auditors from {supplier} asked for {doc_f} by {date}."
            " || What did the {supplier} auditors request? || audit request",
        ),
        "todo": (
            "TODO: pay {invoice} from {supplier} before {date}."
            " || When is the {supplier} invoice {invoice} due? || pay {invoice}",
            "TODO: reconcile the {account} for {month}. || Is the {month} reconciliation of the {account~} finished?",
            "Chase {customer} about overdue {invoice} ({money})."
            " || Which customer owes us on {invoice}? || chase {customer}",
            "TODO: prepare the {quarter} {fin_metric} report for {first} by {weekday}."
            " || What {quarter} report does {first} need? || {quarter} report",
        ),
        "skill": (
            "Expense approvals: under {money} auto-approve, above that route to {first}."
            " || Who approves expenses above {money}? || expense approvals",
            "To onboard a new {category} vendor, collect tax forms and bank details, then raise a PO."
            " || How do I onboard a new {category~} supplier? || vendor onboarding",
            "Month-end close: reconcile the {account} first, then accruals, then send the pack to {first}."
            " || What comes first in the month-end close for the {account~}? || month-end close",
        ),
        "intent": (
            "If {fin_metric} drops below {money}, alert {first} and freeze hiring."
            " || What happens if {fin_metric~} falls under {money}?",
            "When {supplier} sends the credit note, apply it to {invoice}."
            " || What do we do with the {supplier} credit note?",
        ),
        "reflection": (
            "{category} spend keeps creeping up every quarter; most of it is unused seats."
            " || Why is {category~} spending rising? || {category} trend",
            "{customer} pays late almost every month; consider stricter terms."
            " || Is {customer} a late payer? || {customer} payments",
        ),
        "scratch": (
            "{invoice} from {supplier}: {money}? check the PO and ask {first}",
            "{quarter} numbers: {fin_metric} {money}, {category} over by {pct}, verify",
        ),
    },
}

#: Follow-up sentences appended to some memories (slot values already drawn are reused).
EXTRAS: dict[str, tuple[str, ...]] = {
    "devops": (
        "{person} is on call this week and holds the pager until {weekday}.",
        "The error budget for {service} is down to {pct} for the month.",
        "Dashboards for this live in {tool} under the {service} folder.",
        "The status page was updated at {time} and customers were notified.",
        "Customer impact was limited to {region}; other regions stayed healthy.",
        "See {inc} for the full timeline and the chat log.",
        "{metric} is back to normal but we are keeping an eye on it.",
        "The rollback took {dur} end to end, mostly waiting on health checks.",
        "{person} reviewed the change and approved the follow-up fix.",
        "No data was lost, but some requests were retried twice.",
        "We should automate this step; doing it by hand is error-prone.",
    ),
    "support": (
        "{first} was {sentiment} on the call but stayed polite throughout.",
        "Linked to {sup} so the history stays in one place.",
        "They are on the {plan} plan, so the priority queue applies.",
        "The account owner on our side is {person}.",
        "The reply went out via {channel} with a link to the help article.",
        "A satisfaction survey was sent afterwards; no response yet.",
        "The same issue was reported by {customer#2} last month.",
        "Engineering thinks a proper fix lands in the next release.",
        "{first} asked for a credit if it happens again.",
    ),
    "sales": (
        "The next call is {when}; agenda is pricing and rollout.",
        "{person} will join the next meeting to cover security questions.",
        "The deal is worth roughly {money} in the first year.",
        "They also evaluated {competitor} but found it too rigid.",
        "A decision is expected {when}, pending budget approval.",
        "{first} asked specifically about {feature} and its limits.",
        "Champion on their side seems strong; procurement is the risk.",
        "Logged the notes in the CRM and updated the close date.",
    ),
    "research": (
        "Logged the run in the {project} tracker with the config hash.",
        "Seeds used: {num}; variance across seeds was small.",
        "The code is on the {branch} branch until it gets reviewed.",
        "{person} is not convinced and wants an ablation first.",
        "This needs a second run to confirm before we report it.",
        "Worth comparing with {method#2} on the same split later.",
        "Plots are in the shared notebook next to the earlier baselines.",
        "The numbers are preliminary and should not be quoted yet.",
    ),
    "errands": (
        "Paid with the {card} card; the total was a bit higher than usual.",
        "The receipt is saved in the {folder} folder.",
        "The user confirmed {when} and asked for a reminder the day before.",
        "The store closes at {time} on weekdays and earlier on Sundays.",
        "{first} offered to help if anything comes up.",
        "Parking nearby is tricky, so leave ten minutes early.",
        "Add it to the shared family calendar so nobody double-books.",
    ),
    "travel": (
        "The loyalty number is on file, so lounge access should work.",
        "The meeting with {customer} is at {time} on the first day.",
        "Weather in {city} looks {weather} that week; pack accordingly.",
        "The per diem for this trip is {money} including meals.",
        "{first} prefers the {seat} on long flights.",
        "The itinerary was shared with the team calendar.",
        "Keep receipts; finance needs them within two weeks of return.",
    ),
    "finance": (
        "The receipt is attached to the entry in the ERP.",
        "Approved by {person} after a quick review of the numbers.",
        "Booked to cost center CC-{num} for now; may be reclassified.",
        "Flagged for the {quarter} review with the controller.",
        "{first} has the supporting documents if auditors ask.",
        "Payment runs happen on {weekday}, so plan around that cutoff.",
        "The exchange rate difference was small and written off.",
    ),
    "*": (
        "Will revisit this {when}.",
        "{person} agreed with the plan.",
        "Source: {person}, via {channel}.",
        "Priority is {prio} for now.",
        "Low confidence; this needs verification before acting on it.",
        "Confirmed twice, so this should be reliable.",
        "Discussed briefly at the {weekday} sync.",
        "More context is in the shared notes.",
        "Nobody objected when this came up at the team meeting.",
        "Double-check this if anything changes next quarter.",
    ),
}

#: Small wording edits used to restate an earlier memory.
RESTATE_SWAPS: dict[str, str] = {
    "prefers": "likes",
    "Deployed": "Shipped",
    "before": "ahead of",
    "usually": "typically",
    "needs": "requires",
    "after": "following",
    "about": "regarding",
    "Booked": "Reserved",
    "every": "each",
    "within": "in under",
    "heavily": "a lot",
    "always": "generally",
    "Sent": "Mailed",
    "Called": "Phoned",
    "Paid": "Settled",
    "reported": "flagged",
    "caused": "triggered",
    "around": "about",
    "wants": "would like",
    "Need": "Have",
}
RESTATE_PREFIXES = ("Reminder: ", "Note: ", "Again: ", "FYI: ", "Re-confirming: ", "Noting again: ")
CORRECTION_PREFIXES = ("Correction: ", "Update: ", "Changed: ", "", "", "")

_STOPWORDS = frozenset(
    _split_words(
        "a an the and or but of to in on at for from by with via is are was were be been it its this that these "
        "those as into over under than then if when so we our us they them their i me my you your he she his her "
        "not no do does did has have had will would can could should about after before again all also any each "
        "up out off per who what which where why how there here just more most other some such only own same "
        "too very todo need"
    )
)

# ---------------------------------------------------------------------------------------------
# Template machinery
# ---------------------------------------------------------------------------------------------

_ENTITY_KEYS = frozenset(k + suffix for k in ENTITY_KINDS for suffix in ("", "#2", "#3"))
_SLOT = re.compile(r"\{([a-z_0-9]+)(#\d)?(~)?\}")
_NEEDS_FIRST = ("service", "product", "airline")  # draw these before slots that depend on them


@dataclass(frozen=True, slots=True)
class _Pattern:
    """A parsed text with slots: literals interleave occurrences (key, kind, paraphrase?).

    ``keys`` are the distinct slot keys in order of first appearance; ``draw_order`` the same as
    (key, kind) pairs with the kinds others depend on (service, product, airline) first.
    """

    literals: tuple[str, ...]
    occurrences: tuple[tuple[str, str, bool], ...]
    keys: tuple[str, ...]
    draw_order: tuple[tuple[str, str], ...]
    fmt: str  # for str.format_map over slot values (a first-name slot reads its ``key@`` surface)
    capitalize: bool  # starts with a lower-case lexicon value ("catering budget ..."): upper-case it


def _parse(text: str) -> _Pattern:
    """Split `text` into literals and slot occurrences."""
    literals: list[str] = []
    occurrences: list[tuple[str, str, bool]] = []
    pos = 0
    for m in _SLOT.finditer(text):
        literals.append(text[pos : m.start()])
        kind = m.group(1)
        occurrences.append((kind + (m.group(2) or ""), kind, m.group(3) is not None))
        pos = m.end()
    literals.append(text[pos:])
    keys = tuple(dict.fromkeys(key for key, _, _ in occurrences))
    pairs = [(key, key.split("#")[0]) for key in keys]
    draw_order = tuple(sorted(pairs, key=lambda kk: 0 if kk[1] in _NEEDS_FIRST else 1))
    fmt = [literals[0].replace("{", "{{").replace("}", "}}")]
    for (key, kind, _), literal in zip(occurrences, literals[1:], strict=True):
        fmt.append("{" + key + ("@}" if kind == "first" else "}"))
        fmt.append(literal.replace("{", "{{").replace("}", "}}"))
    capitalize = literals[0] == "" and bool(occurrences) and occurrences[0][1] in LEXICON
    return _Pattern(tuple(literals), tuple(occurrences), keys, draw_order, "".join(fmt), capitalize)


@dataclass(frozen=True, slots=True)
class _Template:
    """One content template with its question (may be empty) and title pattern (may be None)."""

    id: str
    topic: str
    type: str
    content: _Pattern
    question: _Pattern | None
    title: _Pattern | None
    question_keys: frozenset[str]
    mutable_keys: tuple[str, ...]  # content slots the question does not mention: the "answer"
    words: tuple[str, ...]  # non-stopword words of the literal text, for exact-keyword queries


def _build_templates() -> dict[str, _Template]:
    """Parse `TEMPLATES` into `_Template`s keyed by id ``topic.type.index``."""
    out: dict[str, _Template] = {}
    for topic, by_type in TEMPLATES.items():
        for type_, lines in by_type.items():
            for index, line in enumerate(lines):
                parts = [p.strip() for p in line.split(" || ")]
                content = _parse(parts[0])
                question = _parse(parts[1]) if len(parts) > 1 and parts[1] else None
                title = _parse(parts[2]) if len(parts) > 2 and parts[2] else None
                qkeys = frozenset(question.keys) if question else frozenset()
                literal = " ".join(content.literals)
                words = tuple(w for w in re.findall(r"[A-Za-z][A-Za-z'-]+", literal) if w.lower() not in _STOPWORDS)
                tid = f"{topic}.{type_}.{index}"
                out[tid] = _Template(
                    id=tid,
                    topic=topic,
                    type=type_,
                    content=content,
                    question=question,
                    title=title,
                    question_keys=qkeys,
                    mutable_keys=tuple(k for k in content.keys if k not in qkeys),
                    words=words,
                )
    return out


TEMPLATE_INDEX: dict[str, _Template] = _build_templates()
_EXTRA_PATTERNS: dict[str, tuple[_Pattern, ...]] = {t: tuple(_parse(s) for s in xs) for t, xs in EXTRAS.items()}


def _parse_lexicon(spec: str) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """Values (popularity order) and their paraphrases from a ``"v|alt; v2"`` lexicon string."""
    values: list[str] = []
    alts: dict[str, tuple[str, ...]] = {}
    for entry in spec.split(";"):
        entry = entry.strip()
        if not entry:
            continue
        head, *rest = (p.strip() for p in entry.split("|"))
        values.append(head)
        if rest:
            alts[head] = tuple(rest)
    return tuple(values), alts


_LEX_VALUES: dict[str, tuple[str, ...]] = {}
#: Paraphrases per value, used by paraphrase queries (``{slot~}``).
PARAPHRASES: dict[str, tuple[str, ...]] = {}
for _kind, _spec in LEXICON.items():
    _LEX_VALUES[_kind], _alts = _parse_lexicon(_spec)
    PARAPHRASES.update(_alts)
_SERVICE_VALUES, _service_alts = _parse_lexicon(SERVICES)
PARAPHRASES.update(_service_alts)


class _Zipf:
    """Draws from `values` with probability ∝ 1 / rank**s (rank 1 = first value)."""

    __slots__ = ("cum", "total", "values")

    def __init__(self, values: Sequence[str], s: float = 1.0) -> None:
        self.values: tuple[str, ...] = tuple(values)
        cum: list[float] = []
        acc = 0.0
        for rank in range(1, len(self.values) + 1):
            acc += rank**-s
            cum.append(acc)
        self.cum: list[float] = cum
        self.total: float = acc

    def draw(self, u: float) -> str:
        """The value at uniform draw `u` in [0, 1)."""
        return self.values[bisect_right(self.cum, u * self.total)]


def _weighted(weights: Sequence[float]) -> tuple[list[float], float]:
    """Cumulative weights and their total, for `bisect_right` sampling."""
    cum: list[float] = []
    acc = 0.0
    for w in weights:
        acc += w
        cum.append(acc)
    return cum, acc


# ---------------------------------------------------------------------------------------------
# Per-tenant world: entity pools, counters and recency indexes
# ---------------------------------------------------------------------------------------------

_Ref = tuple[str, str, bool]  # (key, agent, shared) of an earlier memory


class _Tenant:
    """The entities, id counters and recent-memory indexes of one tenant."""

    def __init__(self, name: str, rng: random.Random) -> None:
        self.name = name
        people: set[str] = set()
        while len(people) < 220:
            people.add(f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}")
        self.pools: dict[str, _Zipf] = {}
        self.pools["person"] = _Zipf(rng.sample(sorted(people), len(people)), 1.0)
        self.pools["doctor"] = _Zipf([f"Dr. {n}" for n in rng.sample(LAST_NAMES, 10)], 1.2)
        companies: set[str] = set()
        while len(companies) < 260:
            name_ = rng.choice(COMPANY_HEADS) + rng.choice(COMPANY_TAILS)
            if rng.random() < 0.45:
                name_ += " " + rng.choice(COMPANY_KINDS)
            companies.add(name_)
        ordered = rng.sample(sorted(companies), len(companies))
        famous = [t.capitalize() for t in TENANTS if t != name]
        rng.shuffle(famous)
        self.pools["customer"] = _Zipf(famous[:4] + ordered[:180], 1.0)
        self.pools["supplier"] = _Zipf(ordered[180:], 1.05)
        self.pools["product"] = _Zipf([f"{name.capitalize()} {w}" for w in rng.sample(PRODUCT_WORDS, 8)], 0.9)
        self.pools["service"] = _Zipf(rng.sample(_SERVICE_VALUES, 20), 0.9)
        self.pools["host"] = _Zipf([f"{p}.{name}.com" for p in rng.sample(HOST_PREFIXES, 10)], 1.0)
        self.pools["project"] = _Zipf([f"Project {p}" for p in rng.sample(PROJECT_NAMES, 12)], 1.0)
        self.pools["city"] = _Zipf(rng.sample(CITIES, len(CITIES)), 1.1)
        self.counters: dict[str, list[int]] = {
            "inc": [rng.randint(1000, 6000)],
            "sup": [rng.randint(10000, 40000)],
            "exp": [rng.randint(10, 300)],
            "invoice": [rng.randint(100, 900)],
        }
        self.recent_ids: dict[str, list[str]] = {kind: [] for kind in self.counters}
        self.versions: dict[str, list[int]] = {}
        self.code = f"{name[:3].upper()}{rng.randint(100, 999)}"
        self.by_entity: dict[str, list[_Ref]] = {}
        self.by_topic: dict[str, list[_Ref]] = {}
        self.recent: deque[MemorySpec] = deque(maxlen=300)


# ---------------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------------

_ID_FORMATS = {"inc": "INC-{}", "sup": "SUP-{}", "exp": "exp-{}", "invoice": "INV-{}"}
_ID_NEW_P = {"inc": 0.35, "sup": 0.45, "exp": 0.4, "invoice": 0.6}


class _Generator:
    """Stateful generator behind `generate`; one instance per call."""

    def __init__(self, seed: int, agents: int, tenants: int, start: float, span_days: int) -> None:
        self.rng = random.Random(f"engramdb-corpus:{seed}")
        world = random.Random(f"engramdb-corpus-world:{seed}")
        self.start = start
        self.span_days = span_days
        self.tenants = [_Tenant(name, world) for name in TENANTS[:tenants]]
        self.tenant_cum, self.tenant_total = _weighted([1.0 / (i + 1) ** 0.6 for i in range(tenants)])
        roster = list(AGENT_ROSTER[:agents])
        for extra in range(len(roster), agents):
            roster.append((f"worker-{extra + 1}", dict.fromkeys(TOPICS, 1.0)))
        self.agent_names = [name for name, _ in roster]
        self.agent_cum, self.agent_total = _weighted([1.0 / (i + 1) ** 0.5 for i in range(agents)])
        self.agent_topics: list[tuple[list[float], float, list[str]]] = []
        for _, affinity in roster:
            topics = [t for t in TOPICS if affinity.get(t, 0.0) > 0]
            cum, total = _weighted([affinity[t] for t in topics])
            self.agent_topics.append((cum, total, topics))
        self.type_cum, self.type_total = _weighted([TYPE_WEIGHTS[t] for t in TYPES])
        self.templates: dict[str, dict[str, list[_Template]]] = {}
        for tpl in TEMPLATE_INDEX.values():
            self.templates.setdefault(tpl.topic, {}).setdefault(tpl.type, []).append(tpl)
        self.importance = {t: _weighted(w) for t, w in IMPORTANCE_WEIGHTS.items()}
        self.lex = {kind: _Zipf(values, 1.0) for kind, values in _LEX_VALUES.items()}
        self.tag_pools = {t: _Zipf(tags, 0.8) for t, tags in TOPIC_TAGS.items()}
        # Timeline: hourly activity with a daily rhythm (office hours), a weekly one (quiet
        # weekends) and a slow growth trend; item i lands at the (i + u) / n quantile.
        hour_shape = (1, 1, 1, 1, 1, 2, 4, 8, 14, 18, 18, 16, 12, 15, 17, 17, 15, 12, 8, 6, 5, 4, 3, 2)
        weights: list[float] = []
        first_day = int(start // 86400)
        for day in range(span_days):
            weekday = (first_day + day + 3) % 7  # 1970-01-01 was a Thursday
            day_w = (1.0, 1.05, 1.05, 1.0, 0.9, 0.35, 0.25)[weekday] * (1.0 + 0.5 * day / max(1, span_days))
            weights.extend(day_w * h for h in hour_shape)
        self.hour_cum, self.hour_total = _weighted(weights)
        self.hour_w = weights
        # Day labels ("March 3") from the first day to three months past the end.
        self.day_labels = []
        self.month_index = []
        for day in range(span_days + 130):
            dt = datetime.fromtimestamp(start + day * 86400, UTC)
            self.day_labels.append(f"{MONTHS[dt.month - 1]} {dt.day}")
            self.month_index.append(dt.month - 1)
        self.drawers: dict[str, Callable[[_Tenant, int, dict[str, str]], str]] = self._drawers()

    # -- slot drawing ------------------------------------------------------------------------

    def _drawers(self) -> dict[str, Callable[[_Tenant, int, dict[str, str]], str]]:
        """A function per slot kind: (tenant, day index, values so far) -> canonical value."""
        rnd = self.rng.random
        randint = self.rng.randint
        drawers: dict[str, Callable[[_Tenant, int, dict[str, str]], str]] = {}

        def lexical(pool: _Zipf) -> Callable[[_Tenant, int, dict[str, str]], str]:
            """A drawer of Zipf-popular values from a global lexicon."""
            values, cum, total = pool.values, pool.cum, pool.total
            return lambda tw, day, vals: values[bisect_right(cum, rnd() * total)]

        def tenant_pool(kind: str) -> Callable[[_Tenant, int, dict[str, str]], str]:
            """A drawer of Zipf-popular entities from the tenant's own pool of `kind`."""

            def draw(tw: _Tenant, day: int, vals: dict[str, str]) -> str:
                pool = tw.pools[kind]
                return pool.values[bisect_right(pool.cum, rnd() * pool.total)]

            return draw

        for kind, pool in self.lex.items():
            drawers[kind] = lexical(pool)
        for kind in ("person", "doctor", "customer", "supplier", "product", "service", "host", "project", "city"):
            drawers[kind] = tenant_pool(kind)
        drawers["first"] = drawers["person"]

        def ident(kind: str) -> Callable[[_Tenant, int, dict[str, str]], str]:
            """A drawer of ids (``INC-4821``) that opens new ones or, mostly, reuses recent ones."""
            fmt = _ID_FORMATS[kind]
            p_new = _ID_NEW_P[kind]

            def draw(tw: _Tenant, day: int, vals: dict[str, str]) -> str:
                recent = tw.recent_ids[kind]
                if not recent or rnd() < p_new:
                    counter = tw.counters[kind]
                    counter[0] += 1
                    value = fmt.format(counter[0])
                    recent.append(value)
                    if len(recent) > 40:
                        del recent[0]
                    return value
                return recent[-1 - int(len(recent) * rnd() ** 2.5)]

            return draw

        for kind in _ID_FORMATS:
            drawers[kind] = ident(kind)

        def version(tw: _Tenant, vals: dict[str, str], bump: bool) -> str:
            """The current (or, with `bump`, the next) version of the service or product in `vals`."""
            owner = vals.get("service") or vals.get("product") or tw.pools["service"].draw(rnd())
            state = tw.versions.get(owner)
            if state is None:
                state = tw.versions[owner] = [randint(1, 4), randint(0, 12), randint(0, 9)]
            if bump:
                u = rnd()
                if u < 0.8:
                    state[2] += 1
                elif u < 0.97:
                    state[1] += 1
                    state[2] = 0
                else:
                    state[0] += 1
                    state[1] = state[2] = 0
            return f"v{state[0]}.{state[1]}.{state[2]}"

        drawers["version"] = lambda tw, day, vals: version(tw, vals, False)
        drawers["newversion"] = lambda tw, day, vals: version(tw, vals, True)
        labels = self.day_labels
        months = self.month_index
        drawers["date"] = lambda tw, day, vals: labels[day + 1 + int(30 * rnd() ** 1.5)]
        drawers["month"] = lambda tw, day, vals: MONTHS[(months[day] + randint(0, 4)) % 12]
        weekday = self.lex["weekday"]
        time_ = self.lex["time"]
        whens = _Zipf(
            [
                "on {wd}",
                "by {wd}",
                "tomorrow",
                "next week",
                "at {t}",
                "on {date}",
                "by end of day",
                "this afternoon",
                "after the standup",
                "on {wd} at {t}",
                "early next month",
            ],
            0.8,
        )

        def when(tw: _Tenant, day: int, vals: dict[str, str]) -> str:
            """A time phrase: "on Tuesday", "at 3pm", "tomorrow", "on March 3"…"""
            pattern = whens.draw(rnd())
            if "{" not in pattern:
                return pattern
            return pattern.format(wd=weekday.draw(rnd()), t=time_.draw(rnd()), date=labels[day + randint(1, 21)])

        drawers["when"] = when
        small = _Zipf([str(k) for k in (2, 3, 5, 4, 10, 6, 8, 12, 7, 20, 15, 9, 30, 14, 25, 50, 40, 11, 18, 100)], 0.9)
        drawers["num"] = lambda tw, day, vals: small.draw(rnd())
        drawers["pct"] = lambda tw, day, vals: f"{int(2 + 93 * rnd() ** 1.7)}%"

        def money(tw: _Tenant, day: int, vals: dict[str, str]) -> str:
            """A log-uniform dollar amount rounded to two significant digits: "$4,200"."""
            amount = 10 ** (1.3 + 4 * rnd() ** 1.3)
            digits = len(str(int(amount))) - 2
            rounded = int(round(amount, -max(0, digits)))
            return f"${rounded:,}"

        drawers["money"] = money
        drawers["score"] = lambda tw, day, vals: f"0.{randint(200, 950)}"
        this_year = datetime.fromtimestamp(self.start, UTC).year
        drawers["year"] = lambda tw, day, vals: str(this_year - int(7 * rnd() ** 2))
        alnum = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
        drawers["conf"] = lambda tw, day, vals: "".join(alnum[int(rnd() * 32)] for _ in range(6))
        drawers["code"] = lambda tw, day, vals: tw.code

        def last4(tw: _Tenant, day: int, vals: dict[str, str]) -> str:
            """Four account digits, stable per tenant and account."""
            return str(1000 + sum(map(ord, tw.name + vals.get("account", ""))) * 37 % 9000)

        drawers["last4"] = last4

        def flight(tw: _Tenant, day: int, vals: dict[str, str]) -> str:
            """A flight number of the airline in `vals`: "LH1234"."""
            airline = vals.get("airline") or self.lex["airline"].draw(rnd())
            return f"{AIRLINE_CODES[airline]}{int(10 + 1990 * rnd() ** 2)}"

        drawers["flight"] = flight
        return drawers

    def _fill(self, pattern_keys: Iterable[tuple[str, str]], tw: _Tenant, day: int, vals: dict[str, str]) -> None:
        """Draw a canonical value for each (key, kind) not yet in `vals`; ``kind#2`` differs from ``kind``."""
        drawers = self.drawers
        for key, kind in pattern_keys:
            if key in vals:
                continue
            draw = drawers[kind]
            value = draw(tw, day, vals)
            if key != kind:
                for _ in range(4):
                    if value != vals.get(kind) and value not in vals.values():
                        break
                    value = draw(tw, day, vals)
            vals[key] = value
            if kind == "first":
                vals[key + "@"] = value.split(" ", 1)[0]

    # -- memories ----------------------------------------------------------------------------

    def run(self, n: int) -> Iterator[MemorySpec]:
        """Yield `n` memories in creation order."""
        rnd = self.rng.random
        hour_cum, hour_total, hour_w = self.hour_cum, self.hour_total, self.hour_w
        start = self.start
        for i in range(n):
            q = (i + rnd()) / n * hour_total
            hour = bisect_right(hour_cum, q)
            if hour >= len(hour_cum):
                hour = len(hour_cum) - 1
            offset = 3600.0 * (1.0 - (hour_cum[hour] - q) / hour_w[hour])
            created = int(1000 * (start + hour * 3600 + min(3599.999, max(0.0, offset)))) / 1000
            day = hour // 24
            tw = self.tenants[bisect_right(self.tenant_cum, rnd() * self.tenant_total)]
            key = f"c{i:06d}"
            u = rnd()
            spec: MemorySpec | None = None
            if u < DUPLICATE_RATE:
                spec = self._restatement(key, tw, created, day)
            elif u < DUPLICATE_RATE + CONTRADICTION_RATE:
                spec = self._contradiction(key, tw, created, day)
            if spec is None:
                spec = self._fresh(key, tw, created, day)
            self._remember(tw, spec)
            yield spec

    def _agent(self) -> int:
        """Index of an agent, mildly Zipfian."""
        return bisect_right(self.agent_cum, self.rng.random() * self.agent_total)

    def _fresh(self, key: str, tw: _Tenant, created: float, day: int) -> MemorySpec:
        """A new memory from a random template of a topic the author writes about."""
        rnd = self.rng.random
        ai = self._agent()
        cum, total, topics = self.agent_topics[ai]
        topic = topics[bisect_right(cum, rnd() * total)]
        type_ = TYPES[bisect_right(self.type_cum, rnd() * self.type_total)]
        choices = self.templates[topic][type_]
        tpl = choices[int(rnd() * len(choices))]
        agent = self.agent_names[ai]
        shared = rnd() < SHARED_P[type_]
        vals: dict[str, str] = {}
        self._fill(tpl.content.draw_order, tw, day, vals)
        return self._assemble(key, tw, agent, shared, tpl, vals, created, day, prefix="", links=None, dup_of=None)

    def _assemble(
        self,
        key: str,
        tw: _Tenant,
        agent: str,
        shared: bool,
        tpl: _Template,
        vals: dict[str, str],
        created: float,
        day: int,
        *,
        prefix: str,
        links: tuple[tuple[str, str], ...] | None,
        dup_of: str | None,
        edit: Callable[[str], str] | None = None,
    ) -> MemorySpec:
        """Render content, title, tags, scores, status and links for a memory with slot values `vals`."""
        rng = self.rng
        rnd = rng.random
        keys = tpl.content.keys
        facts = tuple(zip(keys, map(vals.__getitem__, keys), strict=True))
        text = tpl.content.fmt.format_map(vals)
        if tpl.content.capitalize:
            text = text[0].upper() + text[1:]
        if edit is not None:
            text = edit(text)
        sentences = [prefix + text if prefix else text]
        # Follow-up sentences: 45% get one, 35% two; short notes are padded to 8 words.
        n_extra = 0 if tpl.type == "scratch" else (2 if (u := rnd()) < 0.35 else 1 if u < 0.8 else 0)
        words = sentences[0].count(" ") + 1
        while n_extra > 0 or words < 8:
            pool = _EXTRA_PATTERNS[tpl.topic] if rnd() < 0.7 else _EXTRA_PATTERNS["*"]
            pattern = pool[int(rnd() * len(pool))]
            self._fill(pattern.draw_order, tw, day, vals)
            sentence = pattern.fmt.format_map(vals)
            if pattern.capitalize:
                sentence = sentence[0].upper() + sentence[1:]
            if sentence in sentences:
                continue
            if words + sentence.count(" ") + 1 > 60:
                break
            sentences.append(sentence)
            words += sentence.count(" ") + 1
            n_extra -= 1
        content = " ".join(sentences)
        seen: list[str] = []
        for k, v in vals.items():
            if k in _ENTITY_KEYS and v not in seen:
                seen.append(v)
        entities = tuple(seen)
        type_ = tpl.type
        # Title: none for a quarter (most scratch notes), else the template's or the first words.
        title = ""
        u = rnd()
        if u > (0.8 if type_ == "scratch" else 0.25):
            if tpl.title is not None:
                title = tpl.title.fmt.format_map(vals)
            else:
                title = " ".join(content.split(" ")[: 3 + int(rnd() * 4)]).rstrip(".,;:")
        n_tags = bisect_right((0.25, 0.6, 0.88, 1.0), rnd())
        tags: tuple[str, ...] = ()
        if n_tags:
            picked = [self.tag_pools[tpl.topic].draw(rnd())]
            if n_tags > 1:
                type_tags = TYPE_TAGS[type_]
                picked.append(type_tags[int(rnd() * len(type_tags))])
            if n_tags > 2:  # agents often tag by the main entity: "globex", "billing-api", "project-falcon"
                picked.append(
                    entities[0].lower().replace(" ", "-") if entities else self.tag_pools[tpl.topic].draw(rnd())
                )
            tags = tuple(dict.fromkeys(picked))
        cum, total = self.importance[type_]
        # Scores rounded to 1 (importance) or 3 decimals; int() truncation is much cheaper than round().
        importance = min(100, max(0, int(10 * bisect_right(cum, rnd() * total) + 10 * rnd() - 4.5))) / 10
        salience = int(600 * importance / 10 + 400 * rnd() + 0.5) / 1000
        confidence = min(1000, max(50, int(1000 * CONFIDENCE_BASE[type_] + 300 * rnd() - 179.5))) / 1000
        status: str | None = None
        if type_ == "todo":
            age = 1.0 - day / max(1, self.span_days)
            u = rnd()
            status = "done" if u < 0.2 + 0.5 * age else "dropped" if u < 0.3 + 0.5 * age else "open"
        if links is None:
            links = self._links(tw, type_, tpl.topic, entities, agent)
        return MemorySpec(
            key,
            tw.name,
            agent,
            shared,
            type_,
            title,
            content,
            tags,
            entities,
            importance,
            salience,
            confidence,
            created,
            status,
            links,
            tpl.topic,
            tpl.id,
            facts,
            dup_of,
        )

    def _links(
        self, tw: _Tenant, type_: str, topic: str, entities: Sequence[str], agent: str
    ) -> tuple[tuple[str, str], ...]:
        """0–3 links to earlier memories the author can see, mostly sharing an entity, else the topic."""
        rnd = self.rng.random
        if type_ == "reflection":
            if rnd() >= REFLECTION_LINK_RATE:
                return ()
            count = 2 + int(rnd() < 0.5)
        else:
            if rnd() >= LINK_RATE:
                return ()
            u = rnd()
            count = 1 if u < 0.6 else 2 if u < 0.88 else 3
        edges = LINK_EDGES[type_]
        chosen: dict[str, str] = {}
        with_refs = [e for e in entities if e in tw.by_entity]
        for _ in range(count * 3):
            if len(chosen) >= count:
                break
            if with_refs and rnd() < 0.75:
                refs = tw.by_entity[with_refs[int(rnd() * len(with_refs))]]
            else:
                refs = tw.by_topic.get(topic, [])
            if not refs:
                continue
            ref_key, ref_agent, ref_shared = refs[-1 - int(len(refs) * rnd() ** 1.5)]
            if ref_key in chosen or not (ref_shared or ref_agent == agent):
                continue
            chosen[ref_key] = edges[int(len(edges) * rnd() ** 2)]
        return tuple(chosen.items())

    def _pick_recent(self, tw: _Tenant, want: Callable[[MemorySpec], bool]) -> MemorySpec | None:
        """A recent memory of the tenant that satisfies `want`, or None after a few tries."""
        recent = tw.recent
        if not recent:
            return None
        for _ in range(6):
            spec = recent[int(len(recent) * self.rng.random())]
            if want(spec):
                return spec
        return None

    def _author_for(self, original: MemorySpec) -> tuple[str, bool]:
        """An author (and shared flag) that can see `original`: its own author if it is private."""
        if not original.shared or self.rng.random() < 0.6:
            return original.agent, original.shared or self.rng.random() < 0.15
        return self.agent_names[self._agent()], True

    def _restatement(self, key: str, tw: _Tenant, created: float, day: int) -> MemorySpec | None:
        """An earlier memory said again with small edits (same facts, new wording), or None."""
        original = self._pick_recent(tw, lambda s: s.type != "scratch")
        if original is None:
            return None
        rng = self.rng
        tpl = TEMPLATE_INDEX[original.template]
        vals = _with_surfaces(original.facts)
        agent, shared = self._author_for(original)
        root = original.duplicate_of or original.key
        mode = rng.random()
        todo = original.content.startswith("TODO:")
        prefix = RESTATE_PREFIXES[int(rng.random() * len(RESTATE_PREFIXES))] if mode < 0.6 and not todo else ""

        def edit(text: str) -> str:
            """`text` with a small wording change (a synonym, a joined clause)."""
            edited = text
            if mode >= 0.35:
                words = edited.split(" ")
                for j, word in enumerate(words):
                    if word in RESTATE_SWAPS:
                        words[j] = RESTATE_SWAPS[word]
                        break
                edited = " ".join(words)
            if rng.random() < 0.3:
                edited = edited.replace("; ", ", and ", 1)
            if edited == text and not prefix:
                edited = "To do:" + edited[5:] if todo else "Note: " + edited
            return edited

        return self._assemble(
            key, tw, agent, shared, tpl, vals, created, day, prefix=prefix, links=(), dup_of=root, edit=edit
        )

    def _contradiction(self, key: str, tw: _Tenant, created: float, day: int) -> MemorySpec | None:
        """A memory restating an earlier fact with one answer slot changed, linked ``contradicts``."""
        original = self._pick_recent(
            tw,
            lambda s: (
                s.type in ("info", "episode", "skill", "intent") and bool(TEMPLATE_INDEX[s.template].mutable_keys)
            ),
        )
        if original is None:
            return None
        rng = self.rng
        tpl = TEMPLATE_INDEX[original.template]
        vals = _with_surfaces(original.facts)
        candidates = [
            k for k in tpl.mutable_keys if k.split("#")[0] not in ("inc", "sup", "exp", "invoice", "newversion")
        ]
        if not candidates:
            return None
        slot = candidates[int(rng.random() * len(candidates))]
        old = vals.pop(slot)
        kind = slot.split("#")[0]
        for _ in range(6):
            value = self.drawers[kind](tw, day, vals)
            if _surface(kind, value) != _surface(kind, old):  # the text must change, not just the referent
                break
        else:
            return None
        vals[slot] = value
        if kind == "first":
            vals[slot + "@"] = value.split(" ", 1)[0]
        agent, shared = self._author_for(original)
        prefix = CORRECTION_PREFIXES[int(rng.random() * len(CORRECTION_PREFIXES))]
        return self._assemble(
            key,
            tw,
            agent,
            shared,
            tpl,
            vals,
            created,
            day,
            prefix=prefix,
            links=((original.key, "contradicts"),),
            dup_of=None,
        )

    def _remember(self, tw: _Tenant, spec: MemorySpec) -> None:
        """Index `spec` for later links, restatements and contradictions."""
        ref = (spec.key, spec.agent, spec.shared)
        by_entity = tw.by_entity
        for entity in spec.entities:
            refs = by_entity.get(entity)
            if refs is None:
                by_entity[entity] = [ref]
            else:
                refs.append(ref)
                if len(refs) > 8:
                    del refs[0]
        refs = tw.by_topic.setdefault(spec.topic, [])
        refs.append(ref)
        if len(refs) > 24:
            del refs[0]
        tw.recent.append(spec)


def _with_surfaces(facts: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Slot values from `facts`, plus the ``key@`` first-name surfaces that `_Pattern.fmt` reads."""
    vals = dict(facts)
    for key, value in list(vals.items()):
        if key.split("#")[0] == "first":
            vals[key + "@"] = value.split(" ", 1)[0]
    return vals


def _surface(kind: str, value: str) -> str:
    """How a canonical value is written: a ``first`` slot shows only the first name."""
    return value.split(" ", 1)[0] if kind == "first" else value


def _render(pattern: _Pattern, vals: dict[str, str], alt: Callable[[str], str] | None = None) -> str:
    """`pattern` with its slots filled from `vals`; `alt` rewrites values of ``{slot~}`` occurrences."""
    lits = pattern.literals
    out = [lits[0]]
    for j, (key, kind, para) in enumerate(pattern.occurrences):
        value = vals[key]
        if kind == "first":
            value = value.split(" ", 1)[0]
        elif para and alt is not None:
            value = alt(value)
        out.append(value)
        out.append(lits[j + 1])
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def peer_memories(items: Sequence[MemorySpec]) -> list[dict[str, Any]]:
    """The memories as the peer runners take them (see docs/peers.md)."""
    return [
        {"id": it.key, "content": it.content, "type": it.type, "importance": it.importance, "created_ts": it.created_at}
        for it in items
    ]


def generate(
    n: int,
    *,
    seed: int = 0,
    agents: int = 8,
    tenants: int = 4,
    start: float = 1_735_689_600.0,
    span_days: int = 180,
) -> Iterator[MemorySpec]:
    """Stream `n` synthetic memories in creation order (keys ``c000000``…), deterministic in `seed`.

    `agents` agent ids (roster order, then ``worker-N``) write into `tenants` tenants (from
    `TENANTS`); timestamps run from `start` over `span_days` days with daily and weekly rhythm.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if not 1 <= tenants <= len(TENANTS):
        raise ValueError(f"tenants must be between 1 and {len(TENANTS)}")
    if not 1 <= agents <= 999:
        raise ValueError("agents must be between 1 and 999")
    if span_days < 1:
        raise ValueError("span_days must be >= 1")
    return _Generator(seed, agents, tenants, start, span_days).run(n)


_TOKEN = re.compile(r"[a-z0-9$][a-z0-9$%'._/@-]*[a-z0-9%]|[a-z0-9]")
_WORD = re.compile(r"[a-z]+(?:['-][a-z]+)*\Z")


def tokens(text: str) -> list[str]:
    """Lower-cased tokens of `text`: words, ids (``inc-4821``), versions, amounts."""
    return _TOKEN.findall(text.lower())


def vocabulary(items: Iterable[MemorySpec]) -> Counter[str]:
    """Frequencies of the distinct alphabetic words (no digits) in the items' content."""
    counts: Counter[str] = Counter()
    for spec in items:
        counts.update(t for t in tokens(spec.content) if _WORD.match(t))
    return counts


def _visible(spec: MemorySpec, tenant: str, agent: str) -> bool:
    """Whether `agent` in `tenant` can see `spec`: same tenant, and shared or its own."""
    return spec.tenant == tenant and (spec.shared or spec.agent == agent)


def queries(corpus_sample: Sequence[MemorySpec], n: int, seed: int = 0, *, max_relevant: int = 5) -> list[QuerySpec]:
    """Up to `n` evaluation queries about memories of `corpus_sample`, a third of each kind.

    * ``exact``: keywords copied from the target (its identifying slot values and template words);
    * ``partial``: a natural question that reuses the target's slot values but not its wording;
    * ``paraphrase``: the same question with values swapped for paraphrases, sharing few words.

    A query's relevant keys are the sample memories visible to the asking agent that come from
    the same template with the same values for every slot the question mentions (the target, its
    restatements, and memories stating or contradicting the same fact). Targets whose question
    would match more than `max_relevant` memories are skipped, so fewer than `n` queries can come
    back from a small or repetitive sample.
    """
    rng = random.Random(f"engramdb-corpus-queries:{seed}")
    groups: dict[tuple[str, str], list[MemorySpec]] = {}
    for spec in corpus_sample:
        groups.setdefault((spec.tenant, spec.template), []).append(spec)
    agents_by_tenant: dict[str, list[str]] = {}
    for spec in corpus_sample:
        names = agents_by_tenant.setdefault(spec.tenant, [])
        if spec.agent not in names:
            names.append(spec.agent)
    order = [i for i, s in enumerate(corpus_sample) if _askable(TEMPLATE_INDEX[s.template])]
    rng.shuffle(order)
    kinds = ("exact", "partial", "paraphrase")
    out: list[QuerySpec] = []
    used: set[str] = set()
    for index in order:
        if len(out) >= n:
            break
        target = corpus_sample[index]
        if target.key in used:
            continue
        tpl = TEMPLATE_INDEX[target.template]
        question = tpl.question
        assert question is not None
        facts = dict(target.facts)
        kind = kinds[len(out) % 3]
        if kind == "paraphrase" and not any(p and facts[k] in PARAPHRASES for k, _, p in question.occurrences):
            continue
        agent = target.agent
        if target.shared and rng.random() < 0.3:
            agent = rng.choice(agents_by_tenant[target.tenant])
        # What the question says: a first-name slot matches anyone with that first name.
        said = {k: _surface(k.split("#")[0], facts[k]) for k in tpl.question_keys}
        relevant = [
            s.key
            for s in groups[(target.tenant, target.template)]
            if _visible(s, target.tenant, agent) and _says(s, said)
        ]
        if len(relevant) > max_relevant:
            continue
        if kind == "exact":
            text = _exact_query(target, tpl, facts, rng)
        elif kind == "partial":
            text = _render(question, facts)
        else:
            text = _render(question, facts, lambda v: rng.choice(PARAPHRASES[v]) if v in PARAPHRASES else v)
        used.update(relevant)
        out.append(QuerySpec(text, target.tenant, agent, tuple(relevant), kind, target.key))
    return out


def _askable(tpl: _Template) -> bool:
    """Whether `tpl` has a question specific enough to evaluate: it names an entity or two slots."""
    keys = tpl.question_keys
    return tpl.question is not None and (len(keys) >= 2 or any(k.split("#")[0] in ENTITY_KINDS for k in keys))


def _says(spec: MemorySpec, said: dict[str, str]) -> bool:
    """Whether `spec`'s slot values read the same as `said` (slot key -> surface text)."""
    facts = dict(spec.facts)
    return all(_surface(k.split("#")[0], facts.get(k, "")) == v for k, v in said.items())


def _exact_query(target: MemorySpec, tpl: _Template, facts: dict[str, str], rng: random.Random) -> str:
    """Keywords copied from `target`: the question's slot values and up to two template words, in text order."""
    content = target.content
    lowered = content.lower()
    picked: list[str] = []
    for key in tpl.question_keys:
        kind = key.split("#")[0]
        value = _surface(kind, facts[key])
        picked.append(value)
    words = [w for w in tpl.words if w.lower() in lowered]
    picked.extend(rng.sample(words, min(len(words), 2 if picked else 3)))
    picked = list(dict.fromkeys(p for p in picked if p.lower() in lowered))
    picked.sort(key=lambda p: lowered.find(p.lower()))
    return " ".join(picked)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Write a corpus as JSON lines (or just time it) and print the generation rate."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=1000, help="number of memories")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--span-days", type=int, default=180)
    parser.add_argument("--out", type=Path, default=None, help="JSONL file to write (omit to only time generation)")
    parser.add_argument("--vocab", action="store_true", help="also count distinct content words (slower)")
    args = parser.parse_args(argv)
    items = generate(args.n, seed=args.seed, agents=args.agents, tenants=args.tenants, span_days=args.span_days)
    words: Counter[str] = Counter()
    chars = 0
    began = time.perf_counter()
    began_cpu = time.process_time()
    if args.out is not None:
        with args.out.open("w", encoding="utf-8") as fh:
            for spec in items:
                fh.write(json.dumps(spec.to_json(), ensure_ascii=False))
                fh.write("\n")
                chars += len(spec.content)
                if args.vocab:
                    words.update(t for t in tokens(spec.content) if _WORD.match(t))
    else:
        for spec in items:
            chars += len(spec.content)
            if args.vocab:
                words.update(t for t in tokens(spec.content) if _WORD.match(t))
    elapsed = time.perf_counter() - began
    cpu = time.process_time() - began_cpu
    rate = args.n / elapsed if elapsed > 0 else float("inf")
    where = f" to {args.out}" if args.out is not None else ""
    cpu_rate = args.n / cpu if cpu > 0 else float("inf")
    print(
        f"generated {args.n:,} memories{where} in {elapsed:.2f}s ({rate:,.0f} items/s; {cpu:.2f}s CPU, {cpu_rate:,.0f} items/s)"
    )
    if args.n:
        print(f"mean content length {chars / args.n:.0f} chars")
    if args.vocab:
        print(f"vocabulary: {len(words):,} distinct words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
