// Runs the picture tools (python3 + matplotlib via tessel_plot.py, Graphviz's dot) as child processes.
#include "plot.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fcntl.h>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "tessel/support/data_paths.h"
#include "tessel/support/error.h"

namespace fs = std::filesystem;

namespace tessel::cli {
namespace {

/// A temporary file removed when this goes out of scope.
struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& suffix)
      : path(fs::temp_directory_path() / fmt::format("tessel-{}-{}{}", getpid(), counter()++, suffix)) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
  void write(const std::string& text) const {
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) throw UserError(fmt::format("cannot write the temporary file '{}'", path.string()));
  }
  std::string read() const {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
};

/// The program's path: `name` itself when it has a slash, else the first match on $PATH ("" when none).
std::string findProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    fs::path p = fs::path(dir.empty() ? "." : dir) / name;
    if (access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

/// Runs argv[0] with the arguments, stdout and stderr captured into `output`; returns the exit status.
int runProgram(const std::vector<std::string>& argv, std::string& output) {
  TempFile log(".log");
  // Everything the child needs is prepared before fork: it only redirects and execs.
  int fd = open(log.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw UserError(fmt::format("cannot create '{}': {}", log.path.string(), std::strerror(errno)));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    throw UserError(fmt::format("cannot start '{}': {}", argv[0], std::strerror(errno)));
  }
  if (pid == 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  output = log.read();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/// The Python that runs tessel_plot.py: $TESSEL_PYTHON, else Debian's /usr/bin/python3, else python3 on $PATH.
std::string pythonProgram() {
  if (const char* p = std::getenv("TESSEL_PYTHON"); p && *p) return p;
  if (access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

std::string lastLines(const std::string& text) {
  return text.size() <= 1500 ? text : "..." + text.substr(text.size() - 1500);
}

}  // namespace

void checkPictureOutput(const std::string& flag, const std::string& outPath) {
  std::string ext = fs::path(outPath).extension().string();
  if (ext != ".svg" && ext != ".png" && ext != ".pdf")
    throw UserError(fmt::format("{} {}: expected a .svg, .png or .pdf file name", flag, outPath));
  fs::path dir = fs::path(outPath).parent_path();
  if (!dir.empty() && !fs::is_directory(dir))
    throw UserError(fmt::format("{} {}: directory '{}' does not exist", flag, outPath, dir.string()));
}

void drawChart(const std::string& kind, const nlohmann::json& data, const std::string& outPath) {
  const std::string script = dataPaths().plotScript;
  if (!fs::is_regular_file(script))
    throw UserError(fmt::format("cannot draw {}: the plotting script '{}' is missing (reinstall tessel)", outPath, script));
  std::string python = findProgram(pythonProgram());
  if (python.empty())
    throw UserError(fmt::format("cannot draw {}: Python 3 ('{}') was not found; install python3 and "
                                "python3-matplotlib, or set TESSEL_PYTHON", outPath, pythonProgram()));
  TempFile input(".json");
  input.write(data.dump());
  std::string output;
  int rc = runProgram({python, script, kind, input.path.string(), outPath}, output);
  if (rc == 3)
    throw UserError(fmt::format("cannot draw {}: {} has no matplotlib (apt-get install python3-matplotlib, or set "
                                "TESSEL_PYTHON to a Python that has it)", outPath, python));
  if (rc != 0)
    throw UserError(fmt::format("cannot draw {}: {} {} failed (exit status {}):\n{}", outPath, python, script, rc,
                                lastLines(output)));
}

void renderDot(const std::string& dot, const std::string& outPath) {
  std::string program = findProgram("dot");
  if (program.empty())
    throw UserError(fmt::format("cannot render {}: Graphviz's 'dot' program was not found (apt-get install graphviz); "
                                "--dot FILE writes the graph without it",
                                outPath));
  TempFile input(".dot");
  input.write(dot);
  std::string output;
  std::string format = fs::path(outPath).extension().string().substr(1);
  int rc = runProgram({program, "-T" + format, "-o", outPath, input.path.string()}, output);
  if (rc != 0)
    throw UserError(fmt::format("cannot render {}: dot failed (exit status {}):\n{}", outPath, rc, lastLines(output)));
}

}  // namespace tessel::cli
