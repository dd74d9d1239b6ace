# The README's commands are `make run`, `make test` and `make check` (the inner loop);
# everything else is for developers.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

RELEASE := $(BUILD_DIR)/release
TSAN := $(BUILD_DIR)/tsan
# The clang tree: ASan+UBSan, clang's thread-safety analysis of every file, and the fuzz targets.
ASAN := $(BUILD_DIR)/asan
FUZZ := $(ASAN)
# ctest runs this many tests at once. Most tests wait (on a child process, a socket, a fsync)
# rather than compute, so three per core; the CPU-heavy ones say PROCESSORS (ctest counts them
# against this) and the timing-sensitive ones RUN_SERIAL (tests/CMakeLists.txt). Each run
# leaves its times in <tree>/ctest-junit.xml (scripts/slowest-tests.py lists the slowest).
TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 3 )))
# Each stage prints its wall time, so a slow one is seen at once (docs/testing.md).
TIMED = bash $(CURDIR)/scripts/timed.sh

.PHONY: all deps build build-bench run check test test-release test-tsan asan-configure \
	asan-build test-asan test-thread-safety test-image bench bench-durability bench-overload \
	bench-transfers bench-apply bench-backup bench-startup bench-log bench-raft-shape bench-cluster test-cluster bench-replication soak simulate fuzz-build fuzz test-fuzz \
	format tidy clean

all: build

deps:
	@$(TIMED) "install-deps" bash scripts/install-deps.sh

# Release build of every binary and test. The benchmarks are built by the bench targets (below),
# and compiled, not run, by make test's clang tree.
# $(call configure-release,ON|OFF): configures the Release tree with or without the benchmarks.
configure-release = cmake -S . -B $(RELEASE) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	-DLEDGER_BENCH=$(1) $(CMAKE_FLAGS) >/dev/null
build: deps
	@$(call configure-release,OFF)
	@$(TIMED) "release build" cmake --build $(RELEASE) -j $(JOBS)

# The Release build with the benchmarks, for the bench targets.
build-bench: deps
	@$(call configure-release,ON)
	@cmake --build $(RELEASE) -j $(JOBS)

# Starts ledgerd on the defaults in the foreground; pass flags with ARGS="--shards=4". The first
# run creates the ledger in ./data with `ledgerd init`; later runs serve it (a server never
# creates a ledger itself, so a lost directory is refused, not replaced by an empty one).
run: build
	@test -e data || $(RELEASE)/server/ledgerd init --data_dir=./data
	$(RELEASE)/server/ledgerd $(ARGS)

# The inner loop: the Release build and its tests, nothing else (docs/testing.md).
check: test-release

# Every test, three ways: Release; shard/ under ThreadSanitizer; the unit and integration tests
# under AddressSanitizer + UndefinedBehaviorSanitizer, built by clang with its thread-safety
# analysis of every file; then each fuzz target for a bounded time. docs/testing.md says which
# test runs where, and why.
test: test-release test-tsan test-asan test-fuzz

test-release: build
	@cd $(RELEASE) && $(TIMED) "release tests" ctest --output-on-failure -j $(TEST_JOBS) \
	  --output-junit ctest-junit.xml

test-tsan: deps
	@cmake -S . -B $(TSAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLEDGER_SANITIZER=thread \
	  -DLEDGER_SHARD_ONLY=ON >/dev/null
	@$(TIMED) "tsan build" cmake --build $(TSAN) -j $(JOBS)
	@cd $(TSAN) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan_suppressions.txt \
	  $(TIMED) "tsan tests" ctest --output-on-failure -j $(TEST_JOBS) \
	  --output-junit ctest-junit.xml

# The clang tree. Bench and fuzz sources are built (not run) so that the thread-safety analysis
# sees every translation unit; scripts/check-thread-safety.sh fails if one is left out.
asan-configure: deps
	@cmake -S . -B $(ASAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=clang++-14 -DLEDGER_SANITIZER=address -DLEDGER_FUZZ=ON >/dev/null

asan-build: asan-configure
	@$(TIMED) "asan build (clang: thread-safety, fuzz targets)" cmake --build $(ASAN) -j $(JOBS)
	@bash scripts/check-thread-safety.sh $(ASAN)

# The clang tree's build checks clang -Wthread-safety on every translation unit, and
# scripts/check-thread-safety.sh fails if one is left out. What the annotations guarantee:
# docs/architecture.md, "Ownership the compiler checks".
test-thread-safety: asan-build

test-asan: asan-build
	@cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan_suppressions.txt:print_suppressions=0 \
	  $(TIMED) "asan tests" ctest --output-on-failure -j $(TEST_JOBS) \
	  --output-junit ctest-junit.xml

# The libFuzzer targets of fuzz/ (docs/fuzzing.md), in the clang tree; only they are built here.
FUZZ_TARGETS := fuzz_apply_operation fuzz_record_decode fuzz_record_roundtrip fuzz_request \
	ledger-fuzz-seeds
fuzz-build: asan-configure
	@cmake --build $(FUZZ) -j $(JOBS) --target $(FUZZ_TARGETS)

# Each target for FUZZ_SECONDS (default 20) on its seed corpus, two at a time (one per core).
# Fails on any crash, leak, UB or broken property and prints the input that reproduces it.
test-fuzz: fuzz-build
	@$(TIMED) "fuzz" bash fuzz/run_fuzzers.sh --build $(FUZZ) --mode test \
	  --seconds $(or $(FUZZ_SECONDS),20) --jobs $(JOBS) $(if $(FUZZ_TARGET),--target $(FUZZ_TARGET))

# Fuzzing by hand: FUZZ_SECONDS per target (default 300; 0 runs until Ctrl-C), FUZZ_TARGET=one
# target. New corpus entries stay in build/fuzz-out/<target>/corpus and grow run after run;
# FUZZ_KEEP=1 merges those that add coverage into fuzz/corpus/<target>/ to commit.
fuzz: fuzz-build
	bash fuzz/run_fuzzers.sh --build $(FUZZ) --mode explore --seconds $(or $(FUZZ_SECONDS),300) \
	  $(if $(FUZZ_TARGET),--target $(FUZZ_TARGET)) $(if $(FUZZ_KEEP),--keep)

# The image and docker-compose.yml on a real Docker engine (tests/image/run_image_test.py): the
# running engine, else a dockerd it starts and stops; skips, saying why, only where none can start.
test-image:
	@bash scripts/install-deps.sh --image
	python3 tests/image/run_image_test.py .

# Benchmarks (figures in docs/benchmarks.md): the mailbox, shards and metrics in-process, then
# Deposit end to end against the two reference servers (about 5 minutes).
bench: build-bench
	$(RELEASE)/bench/ledger-bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
	python3 bench/e2e_bench.py --build $(RELEASE) --rounds 3 --duration 5 --warmup 1

# Durable Deposits against --durability=none and PostgreSQL, and start-up with a million accounts
# (about 10 minutes; docs/benchmarks.md).
# Issue 13's goal table (about 8 minutes; bench/durability_bench.py --help). More options, e.g.
# DURABILITY_ARGS="--modes sync,none --skip_postgres --million_accounts 0 --json out.json".
DURABILITY_ARGS ?=
bench-durability: build-bench
	python3 bench/durability_bench.py --build $(RELEASE) --rounds 3 --duration 4 --warmup 1 \
		$(DURABILITY_ARGS)

# Issue 14's overload goals (about 2 minutes after the build; bench/overload_bench.py --help):
# per --durability mode (sync, then none) one ledgerd pinned to CPU 0, ledger-loadtest on CPU 1:
# closed-loop capacity, then 1.5x and 2x of it open loop, and the same rates against the
# answer-at-once server as a control. More, e.g. OVERLOAD_ARGS="--rounds 3 --multipliers
# 1,1.5,2,5 --server_args=--max_in_flight=128 --sweep_max_in_flight 64,128,256,512 --json out.json"
# (python3 bench/overload_report.py out.json prints it again).
OVERLOAD_ARGS ?=
bench-overload: build-bench
	python3 bench/overload_bench.py --build $(RELEASE) $(OVERLOAD_ARGS)

# Issue 15's goals (about 2 minutes after the build; bench/transfer_bench.py --help): durable
# Deposits, same-shard and cross-shard Transfers, each a closed loop of 64 against a fresh ledgerd
# pinned to CPU 0 (client on CPU 1), rounds rotated; medians and the ratios to Deposits. More,
# e.g. TRANSFER_ARGS="--rounds 5 --durability none --json_out out.json".
TRANSFER_ARGS ?=
bench-transfers: build-bench
	python3 bench/transfer_bench.py --build $(RELEASE) --rounds 3 $(TRANSFER_ARGS)

# Issue 16's goals (about 8 minutes after the build; bench/apply_bench.py --help): Deposits over
# 100,000 accounts as unary calls and as Apply calls of 1,000 and 8,192, with --durability=none
# and sync, client and ledgerd sharing both cores as the goal says; bytes written per operation,
# fsync rate, and the p99 of a 1,000-operation call at half the maximum rate. More, e.g.
# APPLY_ARGS="--server_cpu 0 --client_cpu 1 --rounds 5".
APPLY_ARGS ?=
bench-apply: build-bench
	python3 bench/apply_bench.py --build $(RELEASE) --rounds 3 $(APPLY_ARGS)

# How much an online backup slows writes (issue 31, item 6; docs/benchmarks.md): unary Deposits
# at 5,000/s over mutual TLS, with and without a `ledgerctl backup` every 4 s, 3 rounds side by
# side; ledgerd on CPU 0, the clients on CPU 1.
bench-backup: build
	bash bench/backup_pause.sh $(abspath $(RELEASE)) 3 15 5000 4

# Issue 31's start-up row: 1M accounts and 20M Deposits, start to serving after a clean stop and
# after a kill (bench/startup_bench.py; about 10 minutes and 3 GB of scratch in /tmp).
bench-startup: build-bench
	python3 bench/startup_bench.py --build $(RELEASE) --rounds 3

# Issue 30's soak (goal 6, docs/benchmarks.md): ledgerd with 4 shards on CPU 0, 4,000 Deposits/s
# over 10,000 accounts and 200 cross-shard Transfers/s among 40 from two ledger-loadtest clients
# on CPU 1, for SOAK_MINUTES (default 30); ledgerd's RSS every 10 s, both clients verified exactly.
# Fails when RSS grows more than 16 MB after minute 5 (bench/soak.py --help). More, e.g.
# SOAK_ARGS="--json soak.json --server_env GLIBC_TUNABLES=glibc.malloc.arena_max=8"; with a
# watcher of the change stream rebuilding every balance for the whole run: SOAK_ARGS=--watch.
SOAK_MINUTES ?= 30
SOAK_ARGS ?=
soak: build
	python3 bench/soak.py --build $(RELEASE) --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# Issue 17's spike (docs/replication.md): libraft and NATS JetStream, three replicas, each in its
# own network namespace with 0.5 ms each way between them (bench/replication/). Not part of the
# server's build: a CMake project of its own, with its own packages. About 5 minutes; as root.
REPLICATION_BUILD ?= $(BUILD_DIR)/replication
# The journal's candidates side by side (issue 31, item 4; docs/architecture.md "The journal as
# a log"): a log file ledgerd writes itself, libraft with one voter, today's RocksDB journal.
bench-log: build-bench
	bash scripts/install-deps.sh --replication-spike
	@cmake -S bench/replication -B $(REPLICATION_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(REPLICATION_BUILD) --target raft_spike
	python3 bench/log_candidates.py --build $(RELEASE) --replication_build $(REPLICATION_BUILD)

# The cluster's fault schedule (tests/e2e/cluster_faults_e2e_test.cc), as root: each replica on
# a host of its own (a network namespace); ROUNDS rounds (default 10, one in make test) of a
# follower's and the leader's SIGKILL, a paused leader, a follower down past the leader's
# snapshot, the leader cut off from both followers and a follower cut off past the snapshot,
# under ledger-loadtest, which must verify exactly; then every replica, leading in turn, must
# answer every balance the same, and their logs must agree. Then the focused network tests and
# the other cluster tests. About 8 minutes at 10 rounds.
ROUNDS ?= 10
test-cluster: build
	@cd $(RELEASE) && GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=100 LEDGER_FAULT_ROUNDS=$(ROUNDS) \
	  $(TIMED) "cluster fault suite" sh -c "./tests/e2e/cluster_fault_tests && ./tests/e2e/e2e_tests \
	  --gtest_filter='ClusterTest.*:ClusterSnapshotTest.*:ClusterLoadtestTest.*'"

# Issue 32's goal rows on this machine (docs/benchmarks.md): one ledgerd against three replicas
# on loopback, every server process on CPU 0 and the load test on CPU 1; Apply calls, unary
# Deposits at capacity and at half the cluster's capacity (bench/cluster_bench.py); then 20
# leader SIGKILLs under load, each timed to the next acknowledged write (bench/cluster_failover.py).
# Both put bench/replication's delay relay between the replicas (1 ms round trip, the relays on
# CPU 1). About 11 minutes.
bench-cluster: build-bench
	python3 bench/cluster_bench.py --build $(RELEASE) --rounds 3
	python3 bench/cluster_failover.py --build $(RELEASE) --kills 20

# Issue 32's first deliverable (docs/replication.md, "The shape"): one Raft group per cluster
# against one per partition, on traces of ledgerd's own log entries, three replicas in network
# namespaces. About 10 minutes; as root.
bench-raft-shape: build-bench
	bash scripts/install-deps.sh --replication-spike
	@cmake -S bench/replication -B $(REPLICATION_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(REPLICATION_BUILD) --target shape_bench delay_proxy
	bash bench/replication/make_traces.sh $(RELEASE) $(REPLICATION_BUILD)/traces
	python3 bench/replication/run_shape.py --build $(REPLICATION_BUILD) \
	  --traces unary=$(REPLICATION_BUILD)/traces/unary.trace,apply=$(REPLICATION_BUILD)/traces/apply.trace

bench-replication:
	bash scripts/install-deps.sh --replication-spike
	@cmake -S bench/replication -B $(REPLICATION_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(REPLICATION_BUILD)
	LREP_BUILD=$(abspath $(REPLICATION_BUILD)) bash bench/replication/run_raft.sh
	LREP_BUILD=$(abspath $(REPLICATION_BUILD)) bash bench/replication/run_nats.sh

# The deterministic shard simulator (sim/, docs/architecture.md "The shard core"). With SEED it
# replays that seed exactly (STEPS batches, default 1000); without, it explores new random seeds
# for SECONDS (default 60), printing each. SIM_FLAGS passes more flags (for example
# --max_in_flight=1, --strict_ttl; see sim/ledger_sim.cc). A failure prints the seed, a trace and
# the command that replays it. `make test` runs seeds 1 to 200 as the ctest simulate_fixed_seeds.
SEED ?=
STEPS ?= 1000
SECONDS ?= 60
SIM_FLAGS ?=
simulate: deps
	@cmake -S . -B $(RELEASE) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(RELEASE) -j $(JOBS) --target ledger-sim
	@if [ -n "$(SEED)" ]; then $(RELEASE)/sim/ledger-sim --seed=$(SEED) --steps=$(STEPS) $(SIM_FLAGS); \
	else $(RELEASE)/sim/ledger-sim --seconds=$(SECONDS) --steps=$(STEPS) $(SIM_FLAGS); fi

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

# clang-tidy needs one compile command per file, which a unity tree does not have: a tree of its
# own, file by file, of which only the generated protobuf/gRPC code is built.
TIDY := $(BUILD_DIR)/tidy
tidy: deps
	@cmake -S . -B $(TIDY) -G Ninja -DCMAKE_BUILD_TYPE=Release -DLEDGER_UNITY_BUILD=OFF >/dev/null
	@cmake --build $(TIDY) -j $(JOBS) --target ledger_proto ledger_storage_proto \
	  loadtest_report_proto ledgerctl_output_proto grpc_health_proto grpc_reflection_proto
	clang-tidy -p $(TIDY) --quiet $$(git ls-files 'shard/*.cc' 'storage/*.cc' 'server/*.cc' 'client/*.cc')

clean:
	rm -rf $(BUILD_DIR)
