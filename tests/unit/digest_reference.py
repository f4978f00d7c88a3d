# digest_reference.py — an independent implementation of core/digest.hpp's specification, for the unit test's known values.
# Run it (python3 tests/unit/digest_reference.py) to recompute the known values test_weight_check.cpp holds.
import struct
M = (1 << 64) - 1
def mix(x):
    x ^= x >> 33; x = (x * 0xff51afd7ed558ccd) & M; x ^= x >> 33
    x = (x * 0xc4ceb9fe1a85ec53) & M; x ^= x >> 33; return x
def term(w, k): return mix(w ^ (((k + 1) * 0x9e3779b97f4a7c15) & M))
def finish(s, n): return mix(s ^ mix((n + 0x632be59bd9b4e019) & M))
def digest(vals):
    bits = [struct.unpack('<I', struct.pack('<f', v))[0] for v in vals]
    if len(bits) % 2: bits.append(0)
    s = 0
    for k in range(len(bits) // 2):
        s = (s + term(bits[2*k] | (bits[2*k+1] << 32), k)) & M
    return finish(s, len(vals))
def combine(h, d): return mix(((h ^ d) + 0x13198a2e03707344) & M)
print("empty %016x" % digest([]))
print("one %016x" % digest([1.0]))
print("three %016x" % digest([1.0, -2.5, 3.25]))
print("ramp %016x" % digest([i * 0.5 - 3 for i in range(1001)]))
h = 0x243f6a8885a308d3
for d in [digest([1.0]), digest([1.0, -2.5, 3.25])]: h = combine(h, d)
h = combine(h, mix(7))
print("state %016x" % h)
