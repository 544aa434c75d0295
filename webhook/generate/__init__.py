"""Manifests generated from the rules and the code, so that what is installed is what the code means: the webhook
configurations and their matchConditions (`webhooks`, `match_conditions`), the backstop policies (`backstop`),
the dashboard, alerts and ServiceMonitor (`observability`), and the reference tables of the docs (`reference`)."""
