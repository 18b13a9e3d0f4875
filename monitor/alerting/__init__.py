"""SLO evaluation, alert delivery (Alertmanager, webhook) and Prometheus rule generation.

May import the engine snapshot and nothing of Kafka or the HTTP server (the rooms of
docs/architecture.md):
``slo`` is pure (snapshot + time in, typed statuses out), ``alerts`` is the only place
that knows alert names and wording, ``delivery`` does the I/O on its own threads, and
``rules`` renders ``monitor rules``. See docs/alerting.md.
"""
