# The broker image: the package and its console script on a slim Python.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY broker ./broker
COPY queues ./queues
COPY admin_api ./admin_api
COPY migrations ./migrations
RUN pip install --no-cache-dir . && useradd --create-home broker
# jemalloc: glibc's malloc keeps what connection churn frees resident (docs/decisions.md). Preloaded
# here, `broker serve` need not start itself again to load it (broker.cli.allocator).
RUN apt-get update && apt-get install -y --no-install-recommends libjemalloc2 && rm -rf /var/lib/apt/lists/*
ENV LD_PRELOAD=libjemalloc.so.2
USER broker
WORKDIR /home/broker
EXPOSE 8080
ENTRYPOINT ["broker"]
CMD ["serve"]
