# CPU image: installs mindspore_doctor and runs its test suite (mirrors scripts/test.sh).
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends chromium chromium-driver libgomp1 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . /app
RUN ./scripts/test.sh --collect-only -q >/dev/null
CMD ["./scripts/test.sh"]
