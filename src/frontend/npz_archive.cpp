// numpy .npz archives: a zip file of .npy members (stored or deflated, zip64 headers as numpy writes them).
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <sstream>
#include <zlib.h>

#include "tessel/frontend/tensor_io.h"
#include "tessel/support/error.h"

namespace tessel {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEndOfCentral = 0x06054b50;
constexpr uint32_t kZip64EndLocator = 0x07064b50, kZip64End = 0x06064b50;

/// Bounds-checked little-endian reads from the archive bytes; errors name the archive.
class ByteReader {
 public:
  ByteReader(std::string_view bytes, const std::string& path) : bytes_(bytes), path_(path) {}
  uint64_t read(uint64_t offset, int size) const {
    if (offset > bytes_.size() || bytes_.size() - offset < static_cast<uint64_t>(size)) fail("truncated archive");
    uint64_t v = 0;
    for (int i = 0; i < size; ++i) v |= uint64_t{static_cast<unsigned char>(bytes_[offset + static_cast<uint64_t>(i)])} << (8 * i);
    return v;
  }
  std::string_view slice(uint64_t offset, uint64_t size) const {
    if (offset > bytes_.size() || bytes_.size() - offset < size) fail("truncated archive");
    return bytes_.substr(offset, size);
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(fmt::format("'{}' is not a valid .npz archive: {}", path_, why));
  }
  size_t size() const { return bytes_.size(); }

 private:
  std::string_view bytes_;
  const std::string& path_;
};

/// Where the central directory is and how many entries it has (zip64 when the classic fields overflow).
struct CentralDirectory {
  uint64_t offset = 0, entries = 0;
};

CentralDirectory findCentralDirectory(const ByteReader& r) {
  if (r.size() < 22) r.fail("too short for a zip file");
  uint64_t end = r.size() - 22;
  const uint64_t lowest = r.size() > 22 + 65535 ? r.size() - 22 - 65535 : 0;  // the comment is at most 64 KiB
  while (r.read(end, 4) != kEndOfCentral) {
    if (end == lowest) r.fail("no end-of-central-directory record (not a zip file)");
    --end;
  }
  CentralDirectory cd{r.read(end + 16, 4), r.read(end + 10, 2)};
  if (cd.offset == 0xffffffffu || cd.entries == 0xffffu) {
    if (end < 20 || r.read(end - 20, 4) != kZip64EndLocator) r.fail("zip64 fields without a zip64 locator");
    uint64_t z = r.read(end - 20 + 8, 8);
    if (r.read(z, 4) != kZip64End) r.fail("bad zip64 end-of-central-directory record");
    cd.entries = r.read(z + 32, 8);
    cd.offset = r.read(z + 48, 8);
  }
  return cd;
}

/// Inflates a raw deflate stream of known decompressed size.
std::string inflateRaw(std::string_view in, uint64_t outSize, const ByteReader& r, const std::string& member) {
  // Deflate expands at most about 1032:1, so a larger claim is a damaged header (and no huge allocation).
  if (outSize > 1032 * static_cast<uint64_t>(in.size()) + 1024)
    r.fail(fmt::format("member '{}' claims {} bytes from {} compressed", member, outSize, in.size()));
  std::string out(outSize, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) r.fail("zlib cannot be initialised");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = inflate(&z, Z_FINISH);
  uint64_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != outSize) r.fail(fmt::format("member '{}' does not inflate to its size", member));
  return out;
}

/// The zip64 extended-information extra field overrides the 32-bit fields that are 0xffffffff, in order.
void applyZip64Extra(const ByteReader& r, uint64_t extra, uint64_t extraLen, uint64_t& size, uint64_t& compressed,
                     uint64_t& localOffset) {
  for (uint64_t p = extra; p + 4 <= extra + extraLen;) {
    uint64_t id = r.read(p, 2), len = r.read(p + 2, 2);
    uint64_t q = p + 4;
    if (id == 1) {
      for (uint64_t* field : {&size, &compressed, &localOffset})
        if (*field == 0xffffffffu && q + 8 <= p + 4 + len) *field = r.read(q, 8), q += 8;
    }
    p += 4 + len;
  }
}

uint32_t crcOf(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < data.size();) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(data.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + done), chunk);
    done += chunk;
  }
  return static_cast<uint32_t>(crc);
}

void put(std::string& out, uint64_t v, int size) {
  for (int i = 0; i < size; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

std::vector<NamedTensor> readNpz(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseNpz(ss.str(), path);
}

std::vector<NamedTensor> parseNpz(std::string_view bytes, const std::string& path) {
  ByteReader r(bytes, path);
  CentralDirectory cd = findCentralDirectory(r);
  std::vector<NamedTensor> arrays;
  uint64_t p = cd.offset;
  for (uint64_t e = 0; e < cd.entries; ++e) {
    if (r.read(p, 4) != kCentralHeader) r.fail("bad central directory entry");
    uint64_t method = r.read(p + 10, 2), crc = r.read(p + 16, 4);
    uint64_t compressed = r.read(p + 20, 4), size = r.read(p + 24, 4);
    uint64_t nameLen = r.read(p + 28, 2), extraLen = r.read(p + 30, 2), commentLen = r.read(p + 32, 2);
    uint64_t local = r.read(p + 42, 4);
    std::string name(r.slice(p + 46, nameLen));
    applyZip64Extra(r, p + 46 + nameLen, extraLen, size, compressed, local);
    p += 46 + nameLen + extraLen + commentLen;
    if (r.read(local, 4) != kLocalHeader) r.fail(fmt::format("member '{}' has no local header", name));
    uint64_t data = local + 30 + r.read(local + 26, 2) + r.read(local + 28, 2);
    std::string_view raw = r.slice(data, compressed);
    std::string inflated;
    if (method == 8) inflated = inflateRaw(raw, size, r, name);
    else if (method != 0 || compressed != size) r.fail(fmt::format("member '{}' uses compression method {}", name, method));
    std::string_view npy = method == 8 ? std::string_view(inflated) : raw;
    if (crcOf(npy) != crc) r.fail(fmt::format("member '{}' fails its CRC check", name));
    std::string arrayName = name.size() >= 4 && name.substr(name.size() - 4) == ".npy" ? name.substr(0, name.size() - 4) : name;
    arrays.emplace_back(arrayName, parseNpy(npy, fmt::format("{}:{}", path, name)));
  }
  return arrays;
}

void writeNpz(const std::string& path, const std::vector<NamedTensor>& arrays) {
  std::string out, central;
  for (const auto& [arrayName, tensor] : arrays) {
    std::string name = arrayName + ".npy", npy = encodeNpy(tensor);
    if (out.size() + npy.size() >= 0xffffffffu) throw UserError(fmt::format("'{}': archives over 4 GiB are not written", path));
    uint32_t crc = crcOf(npy);
    uint64_t offset = out.size();
    for (std::string* h : {&out, &central}) {
      bool isCentral = h == &central;
      put(*h, isCentral ? kCentralHeader : kLocalHeader, 4);
      if (isCentral) put(*h, 20, 2);  // version made by
      put(*h, 20, 2);                 // version needed
      put(*h, 0, 2), put(*h, 0, 2);   // flags, method (stored)
      put(*h, 0, 2), put(*h, 0x21, 2);  // time, date (1980-01-01)
      put(*h, crc, 4), put(*h, npy.size(), 4), put(*h, npy.size(), 4);
      put(*h, name.size(), 2), put(*h, 0, 2);  // name length, extra length
      if (isCentral) put(*h, 0, 2), put(*h, 0, 2), put(*h, 0, 2), put(*h, 0, 4), put(*h, offset, 4);
      *h += name;
    }
    out += npy;
  }
  uint64_t centralOffset = out.size();
  out += central;
  put(out, kEndOfCentral, 4);
  put(out, 0, 2), put(out, 0, 2), put(out, arrays.size(), 2), put(out, arrays.size(), 2);
  put(out, central.size(), 4), put(out, centralOffset, 4), put(out, 0, 2);
  std::ofstream f(path, std::ios::binary);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  if (!f) throw UserError(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
}

}  // namespace tessel
