# HAProxy from Debian's package, on the local debian:bookworm-slim: the proxy that stands in front
# of ledgerd in docker-compose.yml (deploy/haproxy/haproxy.cfg, mounted read-only, says why and
# what it limits). Runs in the foreground as the unprivileged haproxy user.
FROM debian:bookworm-slim
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends haproxy \
    && rm -rf /var/lib/apt/lists/*
USER haproxy
EXPOSE 50051
# Healthy while the frontend accepts connections on its default bind (:50051).
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/50051"]
# -W: master-worker (a reload is SIGUSR2); -db: stay in the foreground, log to stderr.
ENTRYPOINT ["haproxy", "-W", "-db", "-f", "/etc/haproxy/haproxy.cfg"]
