# The broker image: the package and its console script on a slim Python.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY broker ./broker
COPY queues ./queues
COPY admin_api ./admin_api
COPY migrations ./migrations
RUN pip install --no-cache-dir . && useradd --create-home broker
USER broker
WORKDIR /home/broker
EXPOSE 8080
ENTRYPOINT ["broker"]
CMD ["serve"]
