# ledgerd: build stage (the same install script as the README), then a slim runtime stage that
# carries only the three binaries and the libraries they load.
FROM debian:bookworm-slim AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
COPY tests/node/package.json tests/node/package-lock.json tests/node/
RUN bash scripts/install-deps.sh
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLEDGER_BENCH=OFF \
    && cmake --build build -j "$(nproc)" \
    && build/tests/shard_tests && build/tests/metrics_tests && build/tests/client_tests

FROM debian:bookworm-slim AS runtime
# Every package that provides a shared library the binaries load (checked by make test).
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends \
       libabsl20220623 libbz2-1.0 libc-ares2 libc6 libcivetweb1 libgcc-s1 libgflags2.2 \
       libgrpc++1.51 libgrpc29 liblz4-1 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
       libprotobuf32 libre2-9 librocksdb7.8 libsnappy1v5 libssl3 libstdc++6 libzstd1 zlib1g \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --create-home ledger
COPY --from=build /src/build/server/ledgerd /src/build/client/ledgerctl \
     /src/build/client/ledger-loadtest /usr/local/bin/
USER ledger
WORKDIR /data
EXPOSE 50051 9464
# The start period covers recovery: ledgerd loads every account before it listens.
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=3 \
  CMD ["ledgerctl", "--target=127.0.0.1:50051", "--deadline=2s", "health"]
ENTRYPOINT ["ledgerd"]
CMD ["--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464", "--data_dir=/data/ledger"]
