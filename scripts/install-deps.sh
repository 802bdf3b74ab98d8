#!/usr/bin/env bash
# Installs everything Tessel needs to build, test and benchmark (Debian 12); quick no-op when all is present.
set -euo pipefail

# One Debian package per line; append new dependencies here.
PACKAGES=(
  bc
  build-essential
  cmake
  ninja-build
  ccache
  g++
  clang-14
  libclang-rt-14-dev
  libonnx-dev
  libprotobuf-dev
  protobuf-compiler
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libcli11-dev
  nlohmann-json3-dev
  libfmt-dev
  zlib1g-dev
  pybind11-dev
  python3-dev
  python3-pytest
  python3-onnx
  python3-numpy
  python3-torch
  python3-torchvision
  python3-sklearn
  python3-matplotlib
  graphviz
  nodejs
  npm
)

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

is_present() {
  local package=$1
  case "$package" in
    # Some machines carry a newer Node.js build whose nodejs package bundles npm (and conflicts
    # with Debian's npm package); a working command is what matters.
    nodejs) command -v node >/dev/null 2>&1 && return 0 ;;
    npm) command -v npm >/dev/null 2>&1 && return 0 ;;
  esac
  [[ $(dpkg-query -W -f='${Status}' "$package" 2>/dev/null) == "install ok installed" ]]
}

missing=()
for package in "${PACKAGES[@]}"; do
  is_present "$package" || missing+=("$package")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} Debian packages already installed"
else
  echo "install-deps: installing ${missing[*]}"
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

# ONNX Runtime for the baseline benchmark (bench/ort); set TESSEL_SKIP_NPM=1 to leave it out.
if [[ ${TESSEL_SKIP_NPM:-0} != 1 && -f "$repo_root/bench/ort/package.json" ]]; then
  if [[ -d "$repo_root/bench/ort/node_modules/onnxruntime-node" ]]; then
    echo "install-deps: onnxruntime-node already installed in bench/ort"
  else
    (cd "$repo_root/bench/ort" && npm install --ignore-scripts --no-audit --no-fund)
  fi
fi
