// Reading and writing .tir files with their side file (PATH.bin) of large constants.
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "tessel/ir/text.h"
#include "text_syntax.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> readWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

void writeWholeFile(const fs::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw UserError(fmt::format("{}: cannot open for writing", path.string()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) throw UserError(fmt::format("{}: write failed (disk full or not writable?)", path.string()));
}

}  // namespace

void writeModelTextFile(const Model& model, const std::string& path, const TextPrintOptions& options) {
  std::string side;
  std::string sideName = fs::path(path).filename().string() + ".bin";
  std::string text = printModelText(model, options, &side, sideName);
  writeWholeFile(path, text);
  fs::path sidePath = path + ".bin";
  if (!side.empty()) {
    writeWholeFile(sidePath, side);
  } else {
    // A stale side file from an earlier, larger model would be misleading next to the new text.
    std::error_code ec;
    fs::remove(sidePath, ec);
  }
}

std::unique_ptr<Model> readModelTextFile(const std::string& path) {
  std::optional<std::string> text = readWholeFile(path);
  if (!text || fs::is_directory(path)) throw UserError(fmt::format("{}: cannot read the IR file", path));
  std::optional<std::string> side;
  textir::SideFileLoader loader = [&](const std::string& headerName) -> std::optional<std::string_view> {
    // The header names the side file relative to the text; PATH.bin is the fallback (e.g. after a rename).
    fs::path dir = fs::path(path).parent_path();
    if (!headerName.empty()) side = readWholeFile(dir / headerName);
    if (!side) side = readWholeFile(path + ".bin");
    if (!side) return std::nullopt;
    return std::string_view(*side);
  };
  return textir::parseModelTextWithLoader(*text, path, loader);
}

}  // namespace tessel
