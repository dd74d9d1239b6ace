// Test helper: certificate authorities and certificates made at test time with the openssl
// command (Debian's openssl package), in a scratch directory removed afterwards. No key is ever
// committed to the repository.
#ifndef LEDGER_TESTS_TEST_PKI_H_
#define LEDGER_TESTS_TEST_PKI_H_

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/scratch_dir.h"

namespace ledger::testing_util {

// Not thread-safe. Every file is NAME.pem (certificate) and NAME.key (private key, P-256).
class TestPki {
 public:
  // A self-signed CA called `name`.
  void MakeCa(const std::string& name) {
    Run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "
        "'/CN=ledgerd test CA " +
        name + "' -keyout " + Key(name) + " -out " + Cert(name));
  }

  // A certificate `name` signed by CA `ca`, with subject CN=`common_name`, the subject
  // alternative names `sans` (e.g. "DNS:localhost,IP:127.0.0.1") and serial number `serial`.
  void MakeCert(const std::string& name, const std::string& ca, const std::string& common_name,
                const std::string& sans, int serial = 1) {
    const std::string extensions = dir_.Sub(name + ".ext");
    std::ofstream(extensions) << "subjectAltName=" << sans << "\n";
    Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN=" + common_name +
        "' -keyout " + Key(name) + " -out " + dir_.Sub(name + ".csr"));
    Run("openssl x509 -req -days 2 -in " + dir_.Sub(name + ".csr") + " -CA " + Cert(ca) +
        " -CAkey " + Key(ca) + " -set_serial " + std::to_string(serial) + " -extfile " +
        extensions + " -out " + Cert(name));
  }

  // A server certificate for 127.0.0.1 and localhost.
  void MakeServerCert(const std::string& name, const std::string& ca, int serial = 1) {
    MakeCert(name, ca, "localhost", "DNS:localhost,IP:127.0.0.1", serial);
  }
  // A client certificate whose identity (CN and DNS SAN) is `identity`.
  void MakeClientCert(const std::string& identity, const std::string& ca) {
    MakeCert(identity, ca, identity, "DNS:" + identity);
  }

  // Replaces `to`'s certificate and key with `from`'s, each by an atomic rename, as an operator
  // rotating certificates should.
  void Install(const std::string& from, const std::string& to) {
    std::filesystem::copy_file(Key(from), Key(to) + ".new",
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::copy_file(Cert(from), Cert(to) + ".new",
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::rename(Key(to) + ".new", Key(to));
    std::filesystem::rename(Cert(to) + ".new", Cert(to));
  }

  std::string Cert(const std::string& name) const { return dir_.Sub(name + ".pem"); }
  std::string Key(const std::string& name) const { return dir_.Sub(name + ".key"); }
  std::string Path(const std::string& file) const { return dir_.Sub(file); }

  static std::string Read(const std::string& path) {
    std::ifstream file(path);
    std::stringstream content;
    content << file.rdbuf();
    return content.str();
  }

 private:
  static void Run(const std::string& command) {
    const int status = std::system((command + " >/dev/null 2>&1").c_str());
    ASSERT_EQ(status, 0) << command;
  }

  ScratchDir dir_;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_TEST_PKI_H_
