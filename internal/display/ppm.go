// Package display holds the backend-independent parts of screen and input
// handling: decoding the raw screenshots a backend produces (PPM), encoding
// them for clients (PNG, JPEG, optionally scaled), turning xdotool-style key
// names and typed text into key strokes, and mapping screen pixels to
// absolute pointer coordinates.
//
// Key strokes and pointer coordinates are expressed in QEMU's terms (QKeyCode
// names, the 0..32767 absolute axis) because those are the richest common
// denominator; other backends translate from them.
package display

import (
	"bufio"
	"fmt"
	"image"
	"io"
)

// MaxDimension bounds the width and height of images this package decodes,
// scales or produces, so a corrupt header cannot demand gigabytes.
const MaxDimension = 16384

// DecodePPM decodes a binary PPM image (magic "P6", maxval 255), as written
// by QEMU's screendump, into an opaque *image.RGBA. Comments ("#" to end of
// line) and any whitespace are accepted between header fields. Other
// netpbm variants (ASCII P3, 16-bit maxval, PGM, PBM) are rejected with an
// error that says so.
func DecodePPM(r io.Reader) (*image.RGBA, error) {
	br := bufio.NewReaderSize(r, 512)
	w, h, err := readPPMHeader(br)
	if err != nil {
		return nil, fmt.Errorf("ppm: %w", err)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	n := w * h
	pix := img.Pix
	// Read the RGB triplets into the front of Pix, then spread them to RGBA
	// from the back: pixel i's destination (4i..4i+3) never overlaps an
	// unread source triplet of an earlier pixel (3j..3j+2, j < i), so no
	// second buffer is needed.
	if _, err := io.ReadFull(br, pix[:3*n]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("ppm: pixel data of %dx%d image: %w", w, h, err)
	}
	for i := n - 1; i >= 0; i-- {
		s := pix[3*i : 3*i+3 : 3*i+3]
		r, g, b := s[0], s[1], s[2]
		d := pix[4*i : 4*i+4 : 4*i+4]
		d[0], d[1], d[2], d[3] = r, g, b, 0xff
	}
	return img, nil
}

func readPPMHeader(br *bufio.Reader) (w, h int, err error) {
	var magic [2]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		return 0, 0, fmt.Errorf("read magic: %w", noEOF(err))
	}
	if magic[0] != 'P' || magic[1] != '6' {
		if magic[0] == 'P' && magic[1] >= '1' && magic[1] <= '7' {
			return 0, 0, fmt.Errorf("unsupported netpbm format %q: only binary PPM (P6) is supported", magic[:])
		}
		return 0, 0, fmt.Errorf("not a PPM image (magic %q)", magic[:])
	}
	w, err = readHeaderInt(br, "width")
	if err != nil {
		return 0, 0, err
	}
	h, err = readHeaderInt(br, "height")
	if err != nil {
		return 0, 0, err
	}
	maxval, err := readHeaderInt(br, "maxval")
	if err != nil {
		return 0, 0, err
	}
	if w < 1 || h < 1 || w > MaxDimension || h > MaxDimension {
		return 0, 0, fmt.Errorf("image size %dx%d out of range 1..%d", w, h, MaxDimension)
	}
	if maxval != 255 {
		return 0, 0, fmt.Errorf("unsupported maxval %d: only 255 (8 bits per sample) is supported", maxval)
	}
	// Exactly one whitespace byte separates maxval from the raster; a
	// comment there ends with its newline, which then is that byte.
	c, err := br.ReadByte()
	if err != nil {
		return 0, 0, fmt.Errorf("header end: %w", noEOF(err))
	}
	switch {
	case c == '#':
		if err := skipComment(br); err != nil {
			return 0, 0, err
		}
	case !isSpace(c):
		return 0, 0, fmt.Errorf("header end: byte %#x after maxval, want whitespace", c)
	}
	return w, h, nil
}

// readHeaderInt skips whitespace and comments, then reads a decimal number
// that must be followed by whitespace or a comment.
func readHeaderInt(br *bufio.Reader, field string) (int, error) {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", field, noEOF(err))
		}
		if isSpace(c) {
			continue
		}
		if c == '#' {
			if err := skipComment(br); err != nil {
				return 0, err
			}
			continue
		}
		br.UnreadByte()
		break
	}
	v, digits := 0, 0
	for {
		c, err := br.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", field, noEOF(err))
		}
		if c >= '0' && c <= '9' {
			digits++
			if digits > 6 { // larger than any size or maxval this decoder accepts
				return 0, fmt.Errorf("%s: number too large", field)
			}
			v = v*10 + int(c-'0')
			continue
		}
		if digits == 0 {
			return 0, fmt.Errorf("%s: byte %#x, want a decimal number", field, c)
		}
		if !isSpace(c) && c != '#' {
			return 0, fmt.Errorf("%s: byte %#x after number, want whitespace", field, c)
		}
		br.UnreadByte()
		return v, nil
	}
}

func skipComment(br *bufio.Reader) error {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return fmt.Errorf("comment: %w", noEOF(err))
		}
		if c == '\n' || c == '\r' {
			return nil
		}
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
