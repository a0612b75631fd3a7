# syntax=docker/dockerfile:1
# Build and run the Hourglass broker: `docker build -t hourglass .` (or `docker compose up`).

# --- build: both binaries with the `dist` profile (release code, no debug info, stripped) -----
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --locked --profile dist --package hourglass --package hourglass-ctl

# --- run: Debian slim, a non-root user, the two binaries ----------------------------------------
FROM debian:bookworm-slim
# A fixed system uid/gid (999, as RabbitMQ's own image), so a host directory mounted on
# /var/lib/hourglass can be chown-ed to it.
RUN groupadd --system --gid 999 hourglass \
    && useradd --system --uid 999 --gid hourglass --home-dir /var/lib/hourglass --no-create-home \
        --shell /usr/sbin/nologin hourglass \
    && mkdir -p /var/lib/hourglass \
    && chown hourglass:hourglass /var/lib/hourglass
COPY --from=build /src/target/dist/hourglass /src/target/dist/hourglass-ctl /usr/local/bin/
# Declared after the chown: a new named volume starts with the directory's owner, hourglass.
VOLUME /var/lib/hourglass
# AMQP 0-9-1, management HTTP API, Prometheus.
EXPOSE 5672 15672 15692
ENV HOURGLASS_DATA_DIR=/var/lib/hourglass
USER hourglass:hourglass
WORKDIR /var/lib/hourglass
# Healthy = the management API answers /api/health/checks/local-alarms with 200 (no memory or disk
# alarm). `hourglass --health-check` asks it over loopback with the settings of this container's
# environment (HTTP port) and hourglass-ctl's user (HOURGLASS_CTL_USER / HOURGLASS_CTL_PASSWORD,
# guest/guest by default): no curl in the image.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/hourglass", "--health-check"]
# SIGTERM closes every connection with 320 CONNECTION_FORCED and exits 0 (`docker stop`).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/hourglass"]
