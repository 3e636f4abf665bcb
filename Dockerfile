# veritrain: the API / audit page server and the trainer, in one CPU image.
#   docker build -t veritrain .
#   docker run -p 8000:8000 veritrain            # serves an empty embedded ledger
# docker-compose.yml runs it against PostgreSQL and an S3 server.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# CPU torch first, pinned, from PyTorch's CPU index: the PyPI wheel of the same version pulls
# several GB of CUDA libraries. The version is the Makefile's TORCH; pyproject's torch>=2.7 is
# then already satisfied.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

WORKDIR /opt/veritrain
COPY pyproject.toml README.md ./
COPY attestation ./attestation
COPY records ./records
COPY storage ./storage
COPY ledger ./ledger
COPY trainer ./trainer
COPY web ./web
COPY veritrain ./veritrain
COPY migrations ./migrations
RUN pip install . && veritrain --help > /dev/null

# Run as an unprivileged user; the embedded defaults (SQLite, objects, keys) live in its data dir.
RUN useradd --system --create-home --home-dir /var/lib/veritrain veritrain
USER veritrain
# Created here so that a volume mounted on it starts out owned by this user.
RUN mkdir -m 700 /var/lib/veritrain/keys
WORKDIR /var/lib/veritrain
ENV VERITRAIN_DATA_DIR=/var/lib/veritrain

EXPOSE 8000
CMD ["veritrain", "serve", "--host", "0.0.0.0", "--port", "8000"]
