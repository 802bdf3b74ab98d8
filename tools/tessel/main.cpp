// Entry point of the `tessel` CLI: builds the sub-commands and maps errors to exit statuses
// (0 success, 2 bad input / unsupported model / bad flag, 1 internal error).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.h"
#include "tessel/support/data_paths.h"
#include "tessel/support/error.h"

namespace tessel::cli {
std::string versionText();  // generated at build time (cmake/tessel_version.cmake)

std::vector<CommandRegistration>& commandRegistry() {
  static std::vector<CommandRegistration> registry;
  return registry;
}
}  // namespace tessel::cli

int main(int argc, char** argv) {
  CLI::App app{
      "Tessel: an ahead-of-time neural-network compiler.\n"
      "ONNX -> graph IR (text form) -> passes -> partition by hardware config -> cpu / npu / reference.\n"
      "Run `tessel <command> --help` for a command's options."};
  app.name("tessel");
  app.require_subcommand(1);
  // Where this tessel reads its runtime sources, configurations and plotting script (an installed prefix or the
  // source tree it was built from).
  app.set_version_flag("--version", tessel::cli::versionText() + "\ndata: " +
                                        std::filesystem::path(tessel::dataPaths().runtimeDir).parent_path().string());
  auto& registry = tessel::cli::commandRegistry();
  std::sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (const auto& cmd : registry) cmd.setup(app);
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    bool known = false;
    for (const auto& cmd : registry) {
      names.push_back(cmd.name);
      known |= cmd.name == argv[1];
    }
    if (!known) {
      std::fprintf(stderr, "tessel: error: unknown command '%s' (commands: %s)\nRun with --help for usage.\n", argv[1],
                   fmt::format("{}", fmt::join(names, ", ")).c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {  // a command's own exit status (compare: 1 on a mismatch)
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tessel: error: %s\nRun with --help for usage.\n", e.what());
    return 2;
  } catch (const tessel::UserError& e) {
    std::fprintf(stderr, "tessel: error: %s\n", e.what());
    return 2;
  } catch (const tessel::InternalError& e) {
    std::fprintf(stderr, "tessel: %s\nThis is a bug in Tessel; please report it with the model.\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tessel: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessel: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
