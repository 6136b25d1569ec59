package display

import (
	"bufio"
	"compress/flate"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"io"
)

// encodeOpaqueRGBA writes an opaque RGBA image as an 8-bit RGB PNG. It is
// what image/png does for such an image at BestSpeed, less the part that
// costs most there: choosing a filter for every row by trying all five. A
// screen is flat areas and text, and the Up filter (each byte minus the one
// above it) suits it; the output is a little larger and takes about half the
// time.
func (e *Encoder) encodeOpaqueRGBA(w io.Writer, m *image.RGBA) error {
	b := m.Bounds()
	width, height := b.Dx(), b.Dy()
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("\x89PNG\r\n\x1a\n")
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(width))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(height))
	ihdr[8], ihdr[9] = 8, 2 // bit depth 8, colour type RGB
	writeChunk(bw, "IHDR", ihdr[:])

	idat := &chunkWriter{w: bw, typ: "IDAT"}
	zw := e.zlibWriter(idat)
	rowLen := 1 + 3*width
	cur := make([]byte, rowLen)
	prev := make([]byte, rowLen)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		pix := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := 0; x < width; x++ {
			copy(cur[1+3*x:4+3*x], pix[4*x:4*x+3])
		}
		// Up: the row minus the previous one (zero above the first).
		out := prev // reuse: prev is not needed once filtered
		out[0] = 2
		if y == b.Min.Y {
			copy(out[1:], cur[1:])
		} else {
			for i := 1; i < rowLen; i++ {
				out[i] = cur[i] - prev[i]
			}
		}
		if _, err := zw.Write(out); err != nil {
			return err
		}
		// The next row's "above" is this row's raw bytes.
		prev, cur = cur, out
	}
	if err := zw.Close(); err != nil {
		return err
	}
	e.zlibPool.Put(zw)
	if err := idat.flush(); err != nil {
		return err
	}
	writeChunk(bw, "IEND", nil)
	return bw.Flush()
}

func (e *Encoder) zlibWriter(w io.Writer) *zlib.Writer {
	if zw, ok := e.zlibPool.Get().(*zlib.Writer); ok {
		zw.Reset(w)
		return zw
	}
	zw, _ := zlib.NewWriterLevel(w, flate.BestSpeed)
	return zw
}

// chunkWriter cuts what is written into PNG chunks of up to 64 KiB.
type chunkWriter struct {
	w   *bufio.Writer
	typ string
	buf []byte
	err error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && c.err == nil {
		room := 64<<10 - len(c.buf)
		take := min(room, len(p))
		c.buf = append(c.buf, p[:take]...)
		p = p[take:]
		if len(c.buf) == 64<<10 {
			c.err = c.flush()
		}
	}
	return n, c.err
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := writeChunk(c.w, c.typ, c.buf)
	c.buf = c.buf[:0]
	return err
}

func writeChunk(w *bufio.Writer, typ string, data []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
	copy(hdr[4:], typ)
	w.Write(hdr[:])
	w.Write(data)
	crc := crc32.NewIEEE()
	crc.Write(hdr[4:])
	crc.Write(data)
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc.Sum32())
	_, err := w.Write(sum[:])
	return err
}
