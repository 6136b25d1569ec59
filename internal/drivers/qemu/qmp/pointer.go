package qmp

// PixelToAbs maps pixel (x, y) of a width×height screen to absolute pointer
// coordinates for AbsMove, in 0..AbsMax (the range of QEMU's usb-tablet),
// such that the guest puts the pointer back on exactly that pixel.
// Coordinates outside the screen are clamped to its edge.
//
// Each axis uses a = ceil(p*AbsMax/(n-1)) for pixel p of n. Guests map a
// back to pixels in one of these ways, and this formula round-trips every
// pixel exactly through all of them for screens up to 21845 pixels wide:
//
//   - floor(a*n/32768): the Linux evdev range 0..32767 scaled by libinput's
//     (v-min)*n/(max-min+1), or by xf86-input-evdev through the X server;
//   - trunc(a*65535/32768 * n/65536): xf86-input-libinput, which has libinput
//     scale into 0..65535 and then lets the X server scale that axis
//     (max+1) onto the screen, slightly shrinking every coordinate;
//   - floor(a*(n-1)/32767): scaling by max-min, as older drivers and QEMU's
//     own VNC path do.
//
// Aiming at the pixel centre instead, (p*32768 + n/2)/n, fails the last
// formula at the right and bottom edges; plain floor(p*32767/(n-1)) fails
// it wherever the division is inexact.
func PixelToAbs(x, y, width, height int) (ax, ay int) {
	return pixelToAbs(x, width), pixelToAbs(y, height)
}

func pixelToAbs(p, n int) int {
	if n <= 1 || p <= 0 {
		return 0
	}
	if p >= n-1 {
		return AbsMax
	}
	return (p*AbsMax + n - 2) / (n - 1) // ceil(p*AbsMax/(n-1))
}
