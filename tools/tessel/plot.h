// Pictures for the CLI: charts drawn by matplotlib (tessel_plot.py, installed with tessel) and graphs laid out
// by Graphviz's dot. A missing tool is a clear UserError naming what to install.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tessel::cli {

/// Fails early when `outPath` (given with `flag`) is not a .svg/.png/.pdf file in an existing directory.
void checkPictureOutput(const std::string& flag, const std::string& outPath);

/// Draws chart `kind` ("layers": a horizontal bar chart; "npu-timeline": unit busy lanes and SRAM use) of
/// `data` into outPath with tessel_plot.py (see its header for the data each kind reads).
void drawChart(const std::string& kind, const nlohmann::json& data, const std::string& outPath);

/// Lays out Graphviz DOT text into outPath with `dot` (the format from outPath's extension).
void renderDot(const std::string& dot, const std::string& outPath);

}  // namespace tessel::cli
