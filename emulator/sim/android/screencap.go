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
	"time"

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
	w, h, _ := d.displaySizeLocked()
	img := image.NewPaletted(image.Rect(0, 0, w, h), screenPalette)
	d.drawScreenLocked(pixelCanvas{img}, d.now())
	return img
}

// screenCanvas is what the screen is drawn on: its pixels (pixelCanvas), or
// a hash of the drawing (hashCanvas), which names the pixels it would draw
// at a small part of the cost of drawing them.
type screenCanvas interface {
	// fill paints r (clipped to the screen) with palette index idx.
	fill(r image.Rectangle, idx uint8)
	// text draws one line of s in r (see drawText).
	text(r image.Rectangle, s string, idx uint8, scale int)
}

// pixelCanvas draws into an image of the display's size, which starts as
// pxBackground (index 0).
type pixelCanvas struct{ img *image.Paletted }

func (c pixelCanvas) fill(r image.Rectangle, idx uint8) { fillRect(c.img, r, idx) }
func (c pixelCanvas) text(r image.Rectangle, s string, idx uint8, scale int) {
	drawText(c.img, r, s, idx, scale)
}

// hashCanvas hashes each drawing call with its arguments: the same calls
// on the same size draw the same pixels.
type hashCanvas struct {
	h   maphash.Hash
	buf [8]byte
}

func newHashCanvas(w, h int) *hashCanvas {
	c := &hashCanvas{}
	c.h.SetSeed(pngSeed)
	c.ints(w, h)
	return c
}

func (c *hashCanvas) ints(vs ...int) {
	for _, v := range vs {
		binary.LittleEndian.PutUint64(c.buf[:], uint64(v))
		c.h.Write(c.buf[:])
	}
}

func (c *hashCanvas) fill(r image.Rectangle, idx uint8) {
	c.ints(-1, r.Min.X, r.Min.Y, r.Max.X, r.Max.Y, int(idx))
}

func (c *hashCanvas) text(r image.Rectangle, s string, idx uint8, scale int) {
	c.ints(-2, r.Min.X, r.Min.Y, r.Max.X, r.Max.Y, int(idx), scale, len(s))
	c.h.WriteString(s)
}

// drawOp is one drawing call a listCanvas kept: a fill of r with palette
// index idx, or a text line (text) of s at scale.
type drawOp struct {
	r     image.Rectangle
	idx   uint8
	text  bool
	s     string
	scale int
}

// listCanvas keeps the drawing calls, to draw them later (drawing.image).
type listCanvas struct{ ops []drawOp }

func (c *listCanvas) fill(r image.Rectangle, idx uint8) {
	c.ops = append(c.ops, drawOp{r: r, idx: idx})
}

func (c *listCanvas) text(r image.Rectangle, s string, idx uint8, scale int) {
	c.ops = append(c.ops, drawOp{r: r, idx: idx, text: true, s: s, scale: scale})
}

// drawing is a screen as its drawing calls on a w x h display, and their
// hash (hashCanvas): kilobytes where its pixels are megabytes.
type drawing struct {
	w, h int
	ops  []drawOp
	sum  uint64
}

// image draws the screen's pixels.
func (dr drawing) image() *image.Paletted {
	img := image.NewPaletted(image.Rect(0, 0, dr.w, dr.h), screenPalette)
	cv := pixelCanvas{img}
	for _, op := range dr.ops {
		if op.text {
			cv.text(op.r, op.s, op.idx, op.scale)
		} else {
			cv.fill(op.r, op.idx)
		}
	}
	return img
}

// screenDrawing is the screen now: its drawing hash, and its drawing calls
// too unless the hash is last (the screen has not changed since a drawing
// of that hash; then only sum is set, and changed is false).
func (d *Device) screenDrawing(last uint64) (dr drawing, changed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.advanceLocked()
	now := d.now()
	w, h, _ := d.displaySizeLocked()
	hc := newHashCanvas(w, h)
	d.drawScreenLocked(hc, now)
	dr = drawing{w: w, h: h, sum: hc.h.Sum64()}
	if dr.sum == last {
		return drawing{sum: last}, false
	}
	lc := &listCanvas{}
	d.drawScreenLocked(lc, now)
	dr.ops = lc.ops
	return dr, true
}

// drawScreenLocked draws the screen on cv: the status bar shows now's
// time. Callers hold d.mu and have advanced the faults (advanceLocked).
func (d *Device) drawScreenLocked(cv screenCanvas, now time.Time) {
	w, h, dpi := d.displaySizeLocked()
	screen := image.Rect(0, 0, w, h)
	if !d.am.awake {
		cv.fill(screen, pxNavBar)
		return
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
	drawElement(cv, screen, root, scale)
	g := d.geom()
	cv.fill(image.Rect(0, 0, w, g.status), pxStatusBar)
	cv.text(image.Rect(g.status/2, 0, w, g.status), now.UTC().Format("15:04"), pxBarText, scale)
	cv.fill(image.Rect(0, g.appH, w, h), pxNavBar)
	if d.am.keyguard {
		cv.fill(image.Rect(0, g.status, w, g.appH), pxStatusBar)
		cv.text(image.Rect(w/3, h/3, w, h/3+20*scale), "Swipe up to unlock", pxBarText, scale)
	}
	if dl := d.topDialogLocked(); dl != nil && !d.am.keyguard {
		cv.fill(image.Rect(0, g.status, w, g.appH), pxScrim)
		droot := d.dialogRootLocked(dl)
		cv.fill(boundsRect(droot).Intersect(screen), pxCard)
		drawElement(cv, screen, droot, scale)
	}
}

// ScreenshotPNG is Screenshot encoded as PNG (what `screencap -p` writes).
// The returned bytes are shared: callers must not modify them.
//
// The encodings of the last screens are kept: a settled screen is captured
// again and again (evidence after every WaitIdle, Appium's /screenshot, a
// recording comparing the screen 5 times a second), and encoding a
// 1080x2400 frame was 28% of the simulator's CPU in BenchmarkDaemon32, on
// the same two cores as the daemon it measures. A screen is recognised by
// a hash of its drawing (hashCanvas: the element tree's boxes and texts,
// microseconds), so a screen shown before is neither drawn nor encoded
// again; one not among the kept is drawn into one image kept for that (a
// 1080x2400 frame is 2.6 MB), then encoded.
func (d *Device) ScreenshotPNG() ([]byte, error) {
	d.png.mu.Lock()
	defer d.png.mu.Unlock()
	d.mu.Lock()
	d.advanceLocked()
	now := d.now()
	w, h, _ := d.displaySizeLocked()
	hc := newHashCanvas(w, h)
	d.drawScreenLocked(hc, now)
	key := pngKey{w: w, h: h, sum: hc.h.Sum64()}
	if data := d.png.lookup(key); data != nil {
		d.mu.Unlock()
		return data, nil
	}
	img := d.png.scratch
	if img == nil || img.Rect.Dx() != w || img.Rect.Dy() != h {
		img = image.NewPaletted(image.Rect(0, 0, w, h), screenPalette)
		d.png.scratch = img
	} else {
		clear(img.Pix) // pxBackground, as a new image starts
	}
	d.drawScreenLocked(pixelCanvas{img}, now)
	d.mu.Unlock()
	b, err := encodeScreenPNG(img)
	if err != nil {
		return nil, fmt.Errorf("screencap: encode png: %w", err)
	}
	d.png.store(key, b)
	return b, nil
}

// pngPalette is screenPalette padded to 17 colours for encoding: Go's
// image/png writes a palette of up to 16 colours with 4-bit indices, a
// pixel at a time through ColorIndexAt, and one of 17 or more with 8-bit
// indices, a row at a time (one copy). A 1080x2400 screen then encodes in
// a fraction of the time (BenchmarkScreenshotPNGEncode), into a PNG a few
// kilobytes larger; the pixels are the same.
var pngPalette = func() color.Palette {
	p := append(color.Palette(nil), screenPalette...)
	for len(p) < 17 {
		p = append(p, screenPalette[pxBackground])
	}
	return p
}()

// encodeScreenPNG encodes a drawn screen (palette screenPalette) as PNG,
// with 8-bit indices (pngPalette), at the fastest compression.
func encodeScreenPNG(img *image.Paletted) ([]byte, error) {
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	wide := &image.Paletted{Pix: img.Pix, Stride: img.Stride, Rect: img.Rect, Palette: pngPalette}
	if err := enc.Encode(&buf, wide); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pngCacheScreens is how many screens' PNGs a device keeps: a run goes
// from the launcher to its app and back, a dialog comes and goes.
const pngCacheScreens = 4

// pngCache is the PNGs of the last screens ScreenshotPNG encoded, the most
// recent first, and the image it draws a new screen into. Lock order: mu,
// then Device.mu.
type pngCache struct {
	mu      sync.Mutex
	screens []cachedPNG
	scratch *image.Paletted
}

type cachedPNG struct {
	key  pngKey
	data []byte
}

// lookup is key's PNG, moved to the front; nil when not kept.
func (c *pngCache) lookup(key pngKey) []byte {
	for i, s := range c.screens {
		if s.key == key {
			copy(c.screens[1:i+1], c.screens[:i])
			c.screens[0] = s
			return s.data
		}
	}
	return nil
}

// store keeps key's PNG first, dropping the least recently used past
// pngCacheScreens.
func (c *pngCache) store(key pngKey, data []byte) {
	if len(c.screens) < pngCacheScreens {
		c.screens = append(c.screens, cachedPNG{})
	}
	copy(c.screens[1:], c.screens[:len(c.screens)-1])
	c.screens[0] = cachedPNG{key: key, data: data}
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

func drawElement(cv screenCanvas, screen image.Rectangle, e *Element, scale int) {
	if e == nil {
		return
	}
	r := boundsRect(e).Intersect(screen)
	if !r.Empty() {
		if e.Clickable {
			cv.fill(r, pxClickable)
		}
		cv.fill(image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+1), pxOutline)
		cv.fill(image.Rect(r.Min.X, r.Max.Y-1, r.Max.X, r.Max.Y), pxOutline)
		cv.fill(image.Rect(r.Min.X, r.Min.Y, r.Min.X+1, r.Max.Y), pxOutline)
		cv.fill(image.Rect(r.Max.X-1, r.Min.Y, r.Max.X, r.Max.Y), pxOutline)
		text := e.Text
		if text == "" {
			text = e.ContentDesc
		}
		if text != "" {
			cv.text(r.Inset(4*scale), text, pxText, scale)
		}
	}
	for _, c := range e.Children {
		drawElement(cv, screen, c, scale)
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
