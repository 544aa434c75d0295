# syntax=docker/dockerfile:1
# Build: docker build -t ai-admission:0.1.0 .   (kind: kind load docker-image ai-admission:0.1.0)

FROM python:3.11-slim AS build
# Compilers and make live only in this stage: mypyc compiles the admission core here (setup.py), and some
# dependencies may build from source. The final stage gets the compiled modules, not the compiler.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY setup.cfg setup.py pyproject.toml README.md Makefile constraints.txt ./
COPY webhook ./webhook
COPY certs/__init__.py certs/kube.py ./certs/
COPY rules/default.yaml ./rules/default.yaml
# The same two steps `make` uses (tests/packaging/test_image.py runs them too): wheels of exactly the versions
# constraints.txt pins (what the tests ran), then an install with no index.
RUN python -m venv /opt/ai-admission \
 && make wheels WHEELS=/wheels PYTHON=/opt/ai-admission/bin/python \
 && make install-wheels WHEELS=/wheels PYTHON=/opt/ai-admission/bin/python

FROM python:3.11-slim
ENV PATH=/opt/ai-admission/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    AI_ADMISSION_BIND=0.0.0.0:8443 \
    AI_ADMISSION_TLS_DIR=/etc/ai-admission/tls \
    AI_ADMISSION_RULES=/etc/ai-admission/rules
COPY --from=build /opt/ai-admission /opt/ai-admission
USER 10001:10001
EXPOSE 8443
# No HEALTHCHECK: the Deployment's probes (/healthz, /readyz) do that job in a cluster.
ENTRYPOINT ["gunicorn", "-c", "python:webhook.server.gunicorn_conf"]
