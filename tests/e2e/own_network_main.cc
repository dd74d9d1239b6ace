// main() of the cluster's fault tests (cluster_fault_tests): the process moves to a network
// namespace of its own before anything else, so that ReplicaNetwork can give each replica a host
// of its own and cut the links between them without touching the machine's network
// (tests/e2e/replica_network.h).
#include <iostream>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e/replica_network.h"

namespace ledger::testing_util {

std::string& OwnNetworkError() {
  static std::string* const error = new std::string;
  return *error;
}

}  // namespace ledger::testing_util

int main(int argc, char** argv) {
  // First, while this is the only thread: the threads made later (gRPC's) inherit it.
  std::string error;
  if (!ledger::testing_util::EnterOwnNetworkNamespace(&error)) {
    ledger::testing_util::OwnNetworkError() = error;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
