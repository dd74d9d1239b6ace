#include "server/library_logs.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "base/log_rate_limiter.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"

namespace ledger {
namespace {

// Set while ledgerd starts without --verbose: the lines a refused start provokes (gRPC's "No
// address added", ...) only repeat the reason ledgerd prints itself.
std::atomic<bool> quiet{false};

LogRateLimiter& GrpcLimiter() {
  static LogRateLimiter* limiter = new LogRateLimiter(kLibraryLogLinesPerSecond);
  return *limiter;
}

LogRateLimiter& ProtobufLimiter() {
  static LogRateLimiter* limiter = new LogRateLimiter(kLibraryLogLinesPerSecond);
  return *limiter;
}

// One line on stderr, as the libraries would write it, plus how many were dropped before it.
void WriteLine(const char* library, char severity, const char* file, int line, const char* message,
               int64_t dropped) {
  if (dropped > 0) {
    std::fprintf(stderr, "ledgerd: %s: %lld more log line(s) dropped (rate limit %d/s)\n", library,
                 static_cast<long long>(dropped), kLibraryLogLinesPerSecond);
  }
  std::fprintf(stderr, "ledgerd: %s: %c %s:%d] %s\n", library, severity, file, line, message);
}

void GrpcLog(gpr_log_func_args* args) {
  if (quiet.load(std::memory_order_relaxed)) return;
  const std::optional<int64_t> dropped = GrpcLimiter().Admit();
  if (!dropped.has_value()) return;
  const char severity = args->severity == GPR_LOG_SEVERITY_ERROR  ? 'E'
                        : args->severity == GPR_LOG_SEVERITY_INFO ? 'I'
                                                                  : 'D';
  WriteLine("grpc", severity, args->file, args->line, args->message, *dropped);
}

void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  // A fatal line comes right before protobuf aborts the process: never drop it.
  if (quiet.load(std::memory_order_relaxed) && level != google::protobuf::LOGLEVEL_FATAL) return;
  const std::optional<int64_t> dropped = level == google::protobuf::LOGLEVEL_FATAL
                                             ? std::optional<int64_t>(0)
                                             : ProtobufLimiter().Admit();
  if (!dropped.has_value()) return;
  const char severity = level >= google::protobuf::LOGLEVEL_ERROR     ? 'E'
                        : level == google::protobuf::LOGLEVEL_WARNING ? 'W'
                                                                      : 'I';
  WriteLine("protobuf", severity, file, line, message.c_str(), *dropped);
}

}  // namespace

void LimitLibraryLogs(bool quiet_until_shown) {
  quiet.store(quiet_until_shown);
  gpr_set_log_function(GrpcLog);
  google::protobuf::SetLogHandler(ProtobufLog);
}

void ShowLibraryLogs() { quiet.store(false); }

}  // namespace ledger
