// Reads and writes NumPy .npy files (format 1.0-3.0, C order) as ONNX Runtime tensors' typed arrays.
'use strict';

const fs = require('fs');

const MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]); // "\x93NUMPY"

/** NumPy dtype (without byte order) -> ONNX Runtime tensor type and typed array. */
const DTYPES = {
  f4: { ort: 'float32', array: Float32Array },
  f8: { ort: 'float64', array: Float64Array },
  f2: { ort: 'float16', array: Uint16Array },
  i1: { ort: 'int8', array: Int8Array },
  i2: { ort: 'int16', array: Int16Array },
  i4: { ort: 'int32', array: Int32Array },
  i8: { ort: 'int64', array: BigInt64Array },
  u1: { ort: 'uint8', array: Uint8Array },
  u2: { ort: 'uint16', array: Uint16Array },
  u4: { ort: 'uint32', array: Uint32Array },
  u8: { ort: 'uint64', array: BigUint64Array },
  b1: { ort: 'bool', array: Uint8Array },
};

function npyError(path, message) {
  return new Error(`${path}: ${message}`);
}

/** Parses the Python-literal header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }. */
function parseHeader(path, header) {
  const descr = /'descr':\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) throw npyError(path, `unreadable .npy header ${header.trim()}`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length > 0).map(Number);
  return { descr: descr[1], fortranOrder: fortran[1] === 'True', shape: dims };
}

/** Reads a .npy file into { type, data, shape } (type is ORT's tensor type name). */
function readNpy(path) {
  const bytes = fs.readFileSync(path);
  if (bytes.length < 10 || !bytes.subarray(0, 6).equals(MAGIC)) throw npyError(path, 'not a .npy file');
  const major = bytes[6];
  const headerLengthBytes = major === 1 ? 2 : 4;
  const headerLength = major === 1 ? bytes.readUInt16LE(8) : bytes.readUInt32LE(8);
  const dataOffset = 8 + headerLengthBytes + headerLength;
  const encoding = major === 3 ? 'utf8' : 'latin1';
  const header = parseHeader(path, bytes.toString(encoding, 8 + headerLengthBytes, dataOffset));
  if (header.fortranOrder) throw npyError(path, 'Fortran-order arrays are not supported; save it C-ordered');
  const order = header.descr[0];
  const code = header.descr.slice(1);
  const dtype = DTYPES[code];
  if (!dtype) throw npyError(path, `dtype '${header.descr}' is not supported`);
  if (order === '>' && code !== 'i1' && code !== 'u1' && code !== 'b1') {
    throw npyError(path, `big-endian dtype '${header.descr}' is not supported`);
  }
  const count = header.shape.reduce((a, b) => a * b, 1);
  const byteLength = count * dtype.array.BYTES_PER_ELEMENT;
  if (bytes.length - dataOffset < byteLength) {
    throw npyError(path, `holds ${bytes.length - dataOffset} data bytes, shape needs ${byteLength}`);
  }
  // Copy into a fresh, aligned buffer: typed arrays need offsets that are multiples of the element size.
  const data = new dtype.array(count);
  Buffer.from(data.buffer).set(bytes.subarray(dataOffset, dataOffset + byteLength));
  return { type: dtype.ort, data, shape: header.shape };
}

/** Writes an ORT tensor ({ type, data, dims }) or { type, data, shape } as a version 1.0 .npy file. */
function writeNpy(path, tensor) {
  const dims = tensor.dims || tensor.shape;
  const entry = Object.entries(DTYPES).find(([, d]) => d.ort === tensor.type);
  if (!entry) throw new Error(`${path}: cannot write tensor type '${tensor.type}' as .npy`);
  const [code] = entry;
  const order = code.endsWith('1') ? '|' : '<';
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${order}${code}', 'fortran_order': False, 'shape': ${shape}, }`;
  // NumPy pads the header with spaces so the data starts on a 64-byte boundary, then a newline.
  const unpadded = 10 + header.length + 1;
  header += ' '.repeat((64 - (unpadded % 64)) % 64) + '\n';
  const prefix = Buffer.alloc(10);
  MAGIC.copy(prefix, 0);
  prefix[6] = 1;
  prefix[7] = 0;
  prefix.writeUInt16LE(header.length, 8);
  const data = tensor.data;
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(path, Buffer.concat([prefix, Buffer.from(header, 'latin1'), body]));
}

module.exports = { readNpy, writeNpy };
