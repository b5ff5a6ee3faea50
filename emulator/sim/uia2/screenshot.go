package uia2

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/color"
	"image/png"
)

// screenshotPNGBase64 renders the snapshot as the display would show a wireframe
// of it: a white display-sized PNG with every view's bounds outlined and
// clickable views filled light grey. The answer is base64 PNG, as
// handler/CaptureScreenshot returns.
func screenshotPNGBase64(snap *snapshot) (string, error) {
	w, h := snap.width, snap.height
	if w <= 0 || h <= 0 {
		return "", errUnknown("the display size is unknown")
	}
	pal := color.Palette{color.White, color.Gray{Y: 0xE0}, color.Gray{Y: 0x40}}
	img := image.NewPaletted(image.Rect(0, 0, w, h), pal)
	for i := range img.Pix {
		img.Pix[i] = 0
	}
	for _, n := range snap.nodes {
		if n.el == nil {
			continue
		}
		r := image.Rect(n.el.Bounds[0], n.el.Bounds[1], n.el.Bounds[2], n.el.Bounds[3]).Intersect(img.Rect)
		if r.Empty() {
			continue
		}
		if n.el.Clickable {
			for y := r.Min.Y; y < r.Max.Y; y++ {
				for x := r.Min.X; x < r.Max.X; x++ {
					img.SetColorIndex(x, y, 1)
				}
			}
		}
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetColorIndex(x, r.Min.Y, 2)
			img.SetColorIndex(x, r.Max.Y-1, 2)
		}
		for y := r.Min.Y; y < r.Max.Y; y++ {
			img.SetColorIndex(r.Min.X, y, 2)
			img.SetColorIndex(r.Max.X-1, y, 2)
		}
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, img); err != nil {
		return "", errUnknown(err.Error())
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}
