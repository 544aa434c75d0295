"""The server: the Flask app that speaks AdmissionReview over HTTPS (`app`), run by gunicorn with its own
configuration (`gunicorn_conf`) and worker (`worker`), TLS with certificate reload (`tls`), master-owned listening
sockets (`listeners`), draining on SIGTERM (`draining`), the worker's rules and background services (`services`,
`reload`), readiness checks (`readiness`), the decision cache, metrics and the admission log (`decision_cache`,
`metrics`, `logs`, `batching`). Above `webhook.cluster` and `webhook.core`; only `webhook.cli` is above it."""
