#!/usr/bin/env node
// Times ONNX Runtime (CPU, onnxruntime-node) on one model; the baseline Tessel's benchmarks compare with.
'use strict';

const fs = require('fs');
const path = require('path');
const { readNpy, writeNpy } = require('./npy');

const USAGE = `usage: ort_bench.js MODEL --input NAME=FILE.npy [--input ...] [--threads N] [--warmup W]
                   [--iterations R] [--json] [--output-dir DIR] [--profile PREFIX]
Runs MODEL with ONNX Runtime (intra-op threads N, one inter-op thread, sequential execution,
all graph optimisations); prints median/min/p90 latency in ms; --output-dir writes DIR/<output>.npy;
--profile turns on ONNX Runtime's own profiler and writes its Chrome trace to PREFIX_<date>.json
(bench/ort/ort_profile.py summarises it per node).`;

class UsageError extends Error {}

function positiveInteger(flag, text, allowZero) {
  const value = Number(text);
  if (!Number.isInteger(value) || value < (allowZero ? 0 : 1)) {
    throw new UsageError(`${flag} expects ${allowZero ? 'a non-negative' : 'a positive'} integer, got '${text}'`);
  }
  return value;
}

function parseArgs(argv) {
  const options = { inputs: [], threads: 1, warmup: 5, iterations: 20, json: false, outputDir: null, profile: null, model: null };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new UsageError(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--input') {
      const pair = value();
      const eq = pair.indexOf('=');
      if (eq <= 0) throw new UsageError(`--input expects NAME=FILE.npy, got '${pair}'`);
      options.inputs.push({ name: pair.slice(0, eq), file: pair.slice(eq + 1) });
    } else if (arg === '--threads') options.threads = positiveInteger(arg, value(), false);
    else if (arg === '--warmup') options.warmup = positiveInteger(arg, value(), true);
    else if (arg === '--iterations') options.iterations = positiveInteger(arg, value(), false);
    else if (arg === '--json') options.json = true;
    else if (arg === '--output-dir') options.outputDir = value();
    else if (arg === '--profile') options.profile = value();
    else if (arg === '-h' || arg === '--help') {
      console.log(USAGE);
      process.exit(0);
    } else if (arg.startsWith('-')) throw new UsageError(`unknown option '${arg}'`);
    else if (options.model === null) options.model = arg;
    else throw new UsageError(`unexpected argument '${arg}' (the model is already '${options.model}')`);
  }
  if (options.model === null) throw new UsageError('no MODEL given');
  if (!fs.existsSync(options.model)) throw new UsageError(`model file '${options.model}' does not exist`);
  return options;
}

function loadFeeds(ort, session, inputs) {
  const feeds = {};
  for (const { name, file } of inputs) {
    if (!session.inputNames.includes(name)) {
      throw new UsageError(`--input '${name}': the model's inputs are ${session.inputNames.join(', ')}`);
    }
    const array = readNpy(file);
    feeds[name] = new ort.Tensor(array.type, array.data, array.shape);
  }
  const missing = session.inputNames.filter((name) => !(name in feeds));
  if (missing.length > 0) throw new UsageError(`no --input for model input(s) ${missing.join(', ')}`);
  return feeds;
}

/** Nearest-rank percentile of sorted values. */
function percentile(sorted, fraction) {
  const rank = Math.ceil(fraction * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

function median(sorted) {
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

async function timeRuns(session, feeds, count) {
  const times = [];
  let outputs = null;
  for (let i = 0; i < count; i++) {
    const start = process.hrtime.bigint();
    outputs = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return { times, outputs };
}

function writeOutputs(outputDir, outputs) {
  fs.mkdirSync(outputDir, { recursive: true });
  for (const [name, tensor] of Object.entries(outputs)) writeNpy(path.join(outputDir, `${name}.npy`), tensor);
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const ort = require('onnxruntime-node');
  const session = await ort.InferenceSession.create(options.model, {
    intraOpNumThreads: options.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    ...(options.profile ? { enableProfiling: true, profileFilePrefix: options.profile } : {}),
  });
  const feeds = loadFeeds(ort, session, options.inputs);
  const warm = await timeRuns(session, feeds, options.warmup);
  const measured = await timeRuns(session, feeds, options.iterations);
  if (options.profile) session.endProfiling();
  if (options.outputDir) writeOutputs(options.outputDir, measured.outputs || warm.outputs);
  const sorted = [...measured.times].sort((a, b) => a - b);
  const result = {
    median_ms: median(sorted),
    min_ms: sorted[0],
    p90_ms: percentile(sorted, 0.9),
    threads: options.threads,
  };
  if (options.json) {
    console.log(JSON.stringify(result));
  } else {
    console.log(`${path.basename(options.model)}: ONNX Runtime ${options.threads} thread(s), ` +
      `${options.iterations} runs: median ${result.median_ms.toFixed(3)} ms, ` +
      `min ${result.min_ms.toFixed(3)} ms, p90 ${result.p90_ms.toFixed(3)} ms`);
  }
}

main().catch((error) => {
  console.error(`ort_bench: ${error.message}`);
  if (error instanceof UsageError) console.error(USAGE);
  process.exit(error instanceof UsageError ? 2 : 1);
});
