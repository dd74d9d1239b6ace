# ledgerd: a build stage with only what compiling needs, then a slim runtime stage that carries the
# three binaries and the libraries they load. A new ledger is created once, explicitly:
#   docker run --rm -v ledger-data:/data ledgerd:local init --data_dir=/data/ledger
# (docker compose: `docker compose run --rm ledger-init`); ledgerd refuses to serve a directory
# that holds no ledger, so a volume that failed to mount never becomes an empty ledger.
FROM debian:bookworm-slim AS build
WORKDIR /src
# Compilers, CMake, Ninja and the -dev packages, no test tooling (PostgreSQL, Prometheus, Node.js):
# this layer is cached until the script changes.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
# Every program that tests/ looks for (promtool, node, openssl, haproxy, ...) is a tool of the
# end-to-end tests, which are not built here and whose tools are not installed: each is set to
# /bin/false so that configuring does not look for it, a new one included. The image runs the
# unit tests of shard/, metrics/, storage/ and client/ before it ships the binaries.
RUN test_tools="$(grep -rhoE 'find_program\([A-Z0-9_]+' --include=CMakeLists.txt tests \
                  | sed -E 's|find_program\((.*)|-D\1=/bin/false|' | sort -u)" \
    && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLEDGER_BENCH=OFF $test_tools \
    && cmake --build build -j "$(nproc)" --target ledgerd ledgerctl ledger-loadtest \
       shard_tests metrics_concurrency_tests metrics_tests storage_tests client_tests \
    && for t in shard_tests metrics_concurrency_tests metrics_tests storage_tests client_tests; do \
         build/tests/$t --gtest_brief=1 || exit 1; \
       done

FROM debian:bookworm-slim AS runtime
# Every package that provides a shared library the binaries load (checked by make test).
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends \
       libabsl20220623 libbz2-1.0 libc-ares2 libc6 libcivetweb1 libgcc-s1 libgflags2.2 \
       libgrpc++1.51 libgrpc29 libjemalloc2 liblz4-1 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
       libprotobuf32 libraft2 libre2-9 librocksdb7.8 libsnappy1v5 libssl3 libstdc++6 libuv1 libzstd1 \
       zlib1g \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --create-home ledger
COPY --from=build /src/build/server/ledgerd /src/build/client/ledgerctl \
     /src/build/client/ledger-loadtest /usr/local/bin/
USER ledger
# /data belongs to ledger (uid 10001): a new named volume mounted there takes that owner.
WORKDIR /data
EXPOSE 50051 9464
# The start period covers recovery: ledgerd loads every account before it listens.
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=3 \
  CMD ["ledgerctl", "--target=127.0.0.1:50051", "--deadline=2s", "health"]
# Inside the container ledgerd listens on every interface of the container's own network, in
# plaintext: said by name (--plaintext_beyond_loopback), because a bare ledgerd listens on loopback
# only. Which host interfaces reach it is decided where the port is published (compose: 127.0.0.1
# only, behind HAProxy); docs/deployment.md says why and how to serve TLS instead.
ENTRYPOINT ["ledgerd"]
CMD ["--listen=0.0.0.0:50051", "--plaintext_beyond_loopback", "--metrics_listen=0.0.0.0:9464", \
     "--data_dir=/data/ledger"]
