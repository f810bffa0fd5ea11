# Sluice broker image: non-root, data on a volume, dependencies installed before the source is
# copied (so a source change does not reinstall them), and a healthcheck that speaks the protocol.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/sluice

# 1. Runtime dependencies only, read from pyproject.toml: this layer is cached across source edits.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# 2. The source, installed without touching the dependencies again.
COPY README.md ./
COPY sluice ./sluice
COPY pyspark_sluice.py pyspark_sluice_segments.py ./
COPY config ./config
RUN pip install --no-deps . \
    && useradd --system --uid 10001 --home-dir /var/lib/sluice --shell /usr/sbin/nologin sluice \
    && mkdir -p /var/lib/sluice \
    && chown sluice:sluice /var/lib/sluice

USER sluice
VOLUME ["/var/lib/sluice"]
EXPOSE 9092

HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-m", "sluice.server.network.healthcheck", "127.0.0.1:9092"]

# Every broker key can be set with an environment variable: SLUICE_ + the key in upper case with
# '.' written '_' (a '_' of the key '__', a '-' '___'), e.g. docker run -e
# SLUICE_ADVERTISED_LISTENERS=PLAINTEXT://broker.example:9092. These defaults serve clients on
# the host as localhost:9092 (docker run -p 9092:9092).
ENV SLUICE_LOG_DIRS=/var/lib/sluice \
    SLUICE_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    SLUICE_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9092

CMD ["sluice-server", "--config", "/opt/sluice/config/server.properties"]
