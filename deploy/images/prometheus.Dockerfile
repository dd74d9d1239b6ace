# Prometheus from Debian's package (2.42, the version make test's promtool checks), on the local
# debian:bookworm-slim: nothing is pulled from a registry. Its configuration is mounted at
# /etc/prometheus (docker-compose.yml); its data lives in a volume at /prometheus.
FROM debian:bookworm-slim
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus && chown prometheus:prometheus /prometheus
USER prometheus
WORKDIR /prometheus
EXPOSE 9090
# Ready once the configuration is loaded (no curl in the image: bash's /dev/tcp asks /-/ready).
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9090 && printf 'GET /-/ready HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", \
     "--web.listen-address=0.0.0.0:9090"]
