package display

import (
	"bufio"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/adler32"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
)

// StripRows is the height of a PNGStrips strip in rows.
const StripRows = 16

// RowFunc writes row y of an image into dst as 3*width bytes of red, green
// and blue. It is called from several goroutines at once, for different
// rows.
type RowFunc func(y int, dst []byte)

// PNGStrips encodes a screen that changes a little at a time as PNG,
// compressing again only the strips of StripRows rows that changed since
// the previous encoding.
//
// Each strip is its own deflate stream, compressed at BestSpeed and ended
// with a sync flush, so the compressed strips laid end to end (behind the
// zlib header, before a final empty block and the checksum) are one valid
// zlib stream; the checksum of the whole is combined from the strips'. A
// strip never looks at another: its first row is filtered with Sub (each
// byte less the one to its left), the rest with Up (less the byte above),
// as Encoder's PNG does. The output is a little larger than one stream's
// would be.
//
// The zero value is ready to use. Damage and Encode must not be called
// concurrently (the caller holds the screen's lock for both); Encode
// spreads the damaged strips over GOMAXPROCS goroutines.
type PNGStrips struct {
	width, height int
	strips        []pngStrip
	recompressed  int
	workers       []*stripWorker
}

// pngStrip is one strip's compressed data.
type pngStrip struct {
	data  []byte // deflate blocks, ending in a sync flush
	adler uint32 // of the strip's filtered rows
	n     int    // length of the strip's filtered rows
	dirty bool
}

// stripWorker holds one goroutine's buffers.
type stripWorker struct {
	fw        *flate.Writer
	prev, cur []byte // raw RGB rows
	out       []byte // a filtered row: filter type, then the bytes
	sink      appendWriter
}

// appendWriter appends what is written to a strip's data.
type appendWriter struct{ p *[]byte }

func (a appendWriter) Write(b []byte) (int, error) {
	*a.p = append(*a.p, b...)
	return len(b), nil
}

// Damage marks rows y0 (inclusive) to y1 (exclusive) as changed: their
// strips are compressed again at the next Encode. Rows outside the image
// are ignored.
func (p *PNGStrips) Damage(y0, y1 int) {
	y0 = max(y0, 0)
	y1 = min(y1, p.height)
	for s := y0 / StripRows; y0 < y1 && s <= (y1-1)/StripRows; s++ {
		p.strips[s].dirty = true
	}
}

// Recompressed reports how many strips the last Encode compressed.
func (p *PNGStrips) Recompressed() int { return p.recompressed }

// Encode writes the width×height image whose rows row returns as an 8-bit
// RGB PNG. A size other than the previous encoding's compresses every
// strip; otherwise only the damaged ones are, and row is called only for
// their rows (and the row above each, which Up needs only within a strip,
// so none outside it).
func (p *PNGStrips) Encode(w io.Writer, width, height int, row RowFunc) error {
	if width <= 0 || height <= 0 || width > MaxDimension || height > MaxDimension {
		return fmt.Errorf("png strips: size %dx%d out of range", width, height)
	}
	if width != p.width || height != p.height {
		p.width, p.height = width, height
		n := (height + StripRows - 1) / StripRows
		if cap(p.strips) >= n {
			p.strips = p.strips[:n]
		} else {
			p.strips = make([]pngStrip, n)
		}
		for i := range p.strips {
			p.strips[i].dirty = true
		}
	}
	var todo []int
	for i := range p.strips {
		if p.strips[i].dirty {
			todo = append(todo, i)
		}
	}
	p.recompressed = len(todo)
	if err := p.compress(todo, row); err != nil {
		return err
	}
	return p.write(w)
}

// compress compresses the listed strips, on several goroutines when there
// are several.
func (p *PNGStrips) compress(todo []int, row RowFunc) error {
	n := min(len(todo), runtime.GOMAXPROCS(0))
	for len(p.workers) < n {
		p.workers = append(p.workers, &stripWorker{})
	}
	if n <= 1 {
		for _, s := range todo {
			if err := p.workers[0].compress(p, s, row); err != nil {
				return err
			}
		}
		return nil
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= len(todo) {
					return
				}
				if err := p.workers[i].compress(p, todo[k], row); err != nil {
					errs[i] = err
					return
				}
			}
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// compress filters and compresses strip s into its own deflate stream.
func (sw *stripWorker) compress(p *PNGStrips, s int, row RowFunc) error {
	rowLen := 3 * p.width
	if cap(sw.cur) < rowLen {
		sw.prev, sw.cur, sw.out = make([]byte, rowLen), make([]byte, rowLen), make([]byte, 1+rowLen)
	}
	sw.prev, sw.cur, sw.out = sw.prev[:rowLen], sw.cur[:rowLen], sw.out[:1+rowLen]
	st := &p.strips[s]
	st.data = st.data[:0]
	sw.sink.p = &st.data
	if sw.fw == nil {
		fw, err := flate.NewWriter(sw.sink, flate.BestSpeed)
		if err != nil {
			return err
		}
		sw.fw = fw
	} else {
		sw.fw.Reset(sw.sink)
	}
	sum := adler32.New()
	y0, y1 := s*StripRows, min((s+1)*StripRows, p.height)
	for y := y0; y < y1; y++ {
		row(y, sw.cur)
		f := sw.out[1:]
		if y == y0 {
			sw.out[0] = 1 // Sub
			copy(f[:3], sw.cur[:3])
			for i := 3; i < rowLen; i++ {
				f[i] = sw.cur[i] - sw.cur[i-3]
			}
		} else {
			sw.out[0] = 2 // Up
			for i := range f {
				f[i] = sw.cur[i] - sw.prev[i]
			}
		}
		sum.Write(sw.out)
		if _, err := sw.fw.Write(sw.out); err != nil {
			return err
		}
		sw.prev, sw.cur = sw.cur, sw.prev
	}
	if err := sw.fw.Flush(); err != nil {
		return err
	}
	st.adler, st.n, st.dirty = sum.Sum32(), (y1-y0)*(1+rowLen), false
	return nil
}

// write writes the PNG from the compressed strips.
func (p *PNGStrips) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("\x89PNG\r\n\x1a\n")
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(p.width))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(p.height))
	ihdr[8], ihdr[9] = 8, 2 // bit depth 8, colour type RGB
	writeChunk(bw, "IHDR", ihdr[:])

	idat := &chunkWriter{w: bw, typ: "IDAT"}
	idat.Write([]byte{0x78, 0x01}) // zlib: deflate, 32 KiB window, fastest
	sum := uint32(1)
	for i := range p.strips {
		st := &p.strips[i]
		idat.Write(st.data)
		sum = adler32Combine(sum, st.adler, st.n)
	}
	// A final empty stored block ends the deflate stream.
	idat.Write([]byte{0x01, 0x00, 0x00, 0xff, 0xff})
	var tail [4]byte
	binary.BigEndian.PutUint32(tail[:], sum)
	if _, err := idat.Write(tail[:]); err != nil {
		return err
	}
	if err := idat.flush(); err != nil {
		return err
	}
	writeChunk(bw, "IEND", nil)
	return bw.Flush()
}

// adler32Combine returns the Adler-32 of the concatenation of A and B from
// a = Adler-32(A), b = Adler-32(B) and len(B) (zlib's adler32_combine).
func adler32Combine(a, b uint32, lenB int) uint32 {
	const base = 65521
	rem := uint64(lenB % base)
	a1, a2 := uint64(a&0xffff), uint64(a>>16)
	b1, b2 := uint64(b&0xffff), uint64(b>>16)
	s1 := (a1 + b1 + base - 1) % base
	s2 := (rem*a1 + a2 + b2 + base - rem) % base
	return uint32(s2<<16 | s1)
}
