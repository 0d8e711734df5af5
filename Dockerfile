FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY service service
COPY workers workers
COPY migrations migrations
RUN pip install --no-cache-dir -e ".[service]"
EXPOSE 8000
CMD ["paretune", "serve", "--host", "0.0.0.0", "--port", "8000"]
