package android

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"image"
	"image/color"
	"image/png"
	"strings"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The screen as SurfaceFlinger would composite it: status bar, the focused
// window's views drawn as boxes with their text (golang.org/x/image's 7x13
// bitmap font, scaled by density), the navigation bar, and an error dialog
// over a scrim when one shows. `screencap` (frameworks/base
// cmds/screencap/screencap.cpp) and the UiAutomator2 server's /screenshot
// return it.

// Palette indices of the rendered screen.
const (
	pxBackground = iota
	pxClickable
	pxOutline
	pxText
	pxStatusBar
	pxNavBar
	pxScrim
	pxCard
	pxBarText
)

var screenPalette = color.Palette{
	color.RGBA{0xff, 0xff, 0xff, 0xff}, // background
	color.RGBA{0xe8, 0xea, 0xed, 0xff}, // clickable fill
	color.RGBA{0x5f, 0x63, 0x68, 0xff}, // outline
	color.RGBA{0x20, 0x21, 0x24, 0xff}, // text
	color.RGBA{0x3c, 0x40, 0x43, 0xff}, // status bar
	color.RGBA{0x00, 0x00, 0x00, 0xff}, // navigation bar
	color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, // scrim behind a dialog (black at 50 %)
	color.RGBA{0xf1, 0xf3, 0xf4, 0xff}, // dialog card
	color.RGBA{0xff, 0xff, 0xff, 0xff}, // status bar text
}

// Screenshot renders the current screen at the display's size (`wm size`).
// The screen is black while the display is off.
func (d *Device) Screenshot() *image.Paletted {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.advanceLocked()
	w, h, dpi := d.displaySizeLocked()
	img := image.NewPaletted(image.Rect(0, 0, w, h), screenPalette)
	if !d.am.awake {
		fillRect(img, img.Rect, pxNavBar)
		return img
	}
	scale := dpi / 160
	if scale < 1 {
		scale = 1
	}
	rec := d.am.topLocked()
	root := rec.root
	if root == nil && rec.pkg == homePackage {
		root = d.homeScreenLocked()
	}
	drawElement(img, root, scale)
	g := d.geom()
	fillRect(img, image.Rect(0, 0, w, g.status), pxStatusBar)
	drawText(img, image.Rect(g.status/2, 0, w, g.status), d.now().UTC().Format("15:04"), pxBarText, scale)
	fillRect(img, image.Rect(0, g.appH, w, h), pxNavBar)
	if d.am.keyguard {
		fillRect(img, image.Rect(0, g.status, w, g.appH), pxStatusBar)
		drawText(img, image.Rect(w/3, h/3, w, h/3+20*scale), "Swipe up to unlock", pxBarText, scale)
	}
	if dl := d.topDialogLocked(); dl != nil && !d.am.keyguard {
		fillRect(img, image.Rect(0, g.status, w, g.appH), pxScrim)
		droot := d.dialogRootLocked(dl)
		fillRect(img, boundsRect(droot).Intersect(img.Rect), pxCard)
		drawElement(img, droot, scale)
	}
	return img
}

// ScreenshotPNG is Screenshot encoded as PNG (what `screencap -p` writes).
// The returned bytes are shared: callers must not modify them.
//
// The encoding of the last screen is kept: a settled screen is captured
// again and again (evidence after every WaitIdle, Appium's /screenshot), and
// encoding a 1080x2400 frame was 28% of the simulator's CPU in
// BenchmarkDaemon32, on the same two cores as the daemon it measures. The
// frame is recognised by its size and a maphash of its pixels (0.3 ms, not
// the ~5 ms of an encoding).
func (d *Device) ScreenshotPNG() ([]byte, error) {
	img := d.Screenshot()
	key := pngKey{w: img.Rect.Dx(), h: img.Rect.Dy(), sum: maphash.Bytes(pngSeed, img.Pix)}
	d.png.mu.Lock()
	defer d.png.mu.Unlock()
	if d.png.data != nil && d.png.key == key {
		return d.png.data, nil
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("screencap: encode png: %w", err)
	}
	d.png.key, d.png.data = key, buf.Bytes()
	return d.png.data, nil
}

// pngCache is the PNG of the last screen ScreenshotPNG encoded.
type pngCache struct {
	mu   sync.Mutex
	key  pngKey
	data []byte
}

type pngKey struct {
	w, h int
	sum  uint64
}

var pngSeed = maphash.MakeSeed()

// Raw screencap header values (screencap.cpp; ui/PixelFormat.h, the
// dataspace→colorspace mapping of screencap.cpp: COLORSPACE_SRGB = 1).
const (
	pixelFormatRGBA8888 = 1
	colorSpaceSRGB      = 1
)

// screencapRaw is screencap's raw output: width, height, pixel format and
// (API 28+) the color space as little-endian 32-bit words, then the RGBA_8888
// pixels, row by row without padding.
func screencapRaw(img *image.Paletted, api int) []byte {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	hdr := 12
	if api >= 28 {
		hdr = 16
	}
	out := make([]byte, hdr+w*h*4)
	binary.LittleEndian.PutUint32(out[0:], uint32(w))
	binary.LittleEndian.PutUint32(out[4:], uint32(h))
	binary.LittleEndian.PutUint32(out[8:], pixelFormatRGBA8888)
	if api >= 28 {
		binary.LittleEndian.PutUint32(out[12:], colorSpaceSRGB)
	}
	var lut [256][4]byte
	for i, c := range img.Palette {
		r, g, b, a := c.RGBA()
		lut[i] = [4]byte{byte(r >> 8), byte(g >> 8), byte(b >> 8), byte(a >> 8)}
	}
	o := hdr
	for _, p := range img.Pix {
		copy(out[o:o+4], lut[p][:])
		o += 4
	}
	return out
}

func boundsRect(e *Element) image.Rectangle {
	return image.Rect(e.Bounds[0], e.Bounds[1], e.Bounds[2], e.Bounds[3])
}

func fillRect(img *image.Paletted, r image.Rectangle, idx uint8) {
	r = r.Intersect(img.Rect)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		row := img.Pix[img.PixOffset(r.Min.X, y):img.PixOffset(r.Max.X, y)]
		for i := range row {
			row[i] = idx
		}
	}
}

func drawElement(img *image.Paletted, e *Element, scale int) {
	if e == nil {
		return
	}
	r := boundsRect(e).Intersect(img.Rect)
	if !r.Empty() {
		if e.Clickable {
			fillRect(img, r, pxClickable)
		}
		fillRect(img, image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+1), pxOutline)
		fillRect(img, image.Rect(r.Min.X, r.Max.Y-1, r.Max.X, r.Max.Y), pxOutline)
		fillRect(img, image.Rect(r.Min.X, r.Min.Y, r.Min.X+1, r.Max.Y), pxOutline)
		fillRect(img, image.Rect(r.Max.X-1, r.Min.Y, r.Max.X, r.Max.Y), pxOutline)
		text := e.Text
		if text == "" {
			text = e.ContentDesc
		}
		if text != "" {
			drawText(img, r.Inset(4*scale), text, pxText, scale)
		}
	}
	for _, c := range e.Children {
		drawElement(img, c, scale)
	}
}

// drawText draws one line of s, vertically centred in r and clipped to it,
// each font pixel a scale×scale block. Characters the font lacks show as '?'.
func drawText(img *image.Paletted, r image.Rectangle, s string, idx uint8, scale int) {
	if r.Empty() {
		return
	}
	face := basicfont.Face7x13
	s = strings.Map(func(c rune) rune {
		if c < 0x20 || c > 0x7e {
			return '?'
		}
		return c
	}, s)
	maxChars := r.Dx() / (face.Advance * scale)
	if maxChars <= 0 {
		return
	}
	if len(s) > maxChars {
		s = s[:maxChars]
	}
	mask := image.NewAlpha(image.Rect(0, 0, len(s)*face.Advance, face.Height))
	dr := font.Drawer{Dst: mask, Src: image.Opaque, Face: face, Dot: fixed.P(0, face.Ascent)}
	dr.DrawString(s)
	top := r.Min.Y + (r.Dy()-face.Height*scale)/2
	if top < r.Min.Y {
		top = r.Min.Y
	}
	b := mask.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if mask.AlphaAt(x, y).A == 0 {
				continue
			}
			px := image.Rect(r.Min.X+x*scale, top+y*scale, r.Min.X+(x+1)*scale, top+(y+1)*scale)
			fillRect(img, px.Intersect(r), idx)
		}
	}
}

func init() { registerCommand("screencap", cmdScreencap) }

// cmdScreencap is `screencap [-hp] [-d display-id] [FILENAME]`: PNG with -p or
// a FILENAME ending in .png, else the raw format; to stdout without FILENAME.
// Bad options print the usage on stderr and exit 1, as screencap.cpp does.
func cmdScreencap(c *Ctx) int {
	pngOut := false
	file := ""
	args := c.Args[1:]
	usage := func() int {
		fmt.Fprint(c.Stderr, "usage: screencap [-hp] [-d display-id] [FILENAME]\n"+
			"   -h: this message\n"+
			"   -p: save the file as a png.\n"+
			"   -d: specify the display ID to capture (default: 4619827259835644672)\n"+
			"       see \"dumpsys SurfaceFlinger --display-id\" for valid display IDs.\n"+
			"If FILENAME ends with .png it will be saved as a png.\n"+
			"If FILENAME is not given, the results will be printed to stdout.\n")
		return 1
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-p":
			pngOut = true
		case a == "-d":
			if i+1 >= len(args) {
				return usage()
			}
			i++
			if args[i] != "0" && args[i] != "4619827259835644672" {
				fmt.Fprintf(c.Stderr, "Display Id '%s' is not valid.\n", args[i])
				return 1
			}
		case a == "-h" || strings.HasPrefix(a, "-"):
			return usage()
		default:
			file = a
		}
	}
	if strings.HasSuffix(file, ".png") {
		pngOut = true
	}
	var data []byte
	if pngOut {
		var err error
		if data, err = c.Device.ScreenshotPNG(); err != nil {
			fmt.Fprintln(c.Stderr, err)
			return 1
		}
	} else {
		data = screencapRaw(c.Device.Screenshot(), c.Device.APILevel())
	}
	if file == "" {
		if _, err := c.Stdout.Write(data); err != nil {
			return 1
		}
		return 0
	}
	d := c.Device
	if err := d.writeFileAs(c.path(file), data, 0o660, d.now(), ownerShell); err != nil {
		fmt.Fprintf(c.Stderr, "Error opening file: %s (%s)\n", file, errnoText(err))
		return 1
	}
	return 0
}
