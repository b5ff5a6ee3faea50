package uia2

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// sessionModel is model/api/SessionModel: the new session's answer.
type sessionModel struct {
	Capabilities json.RawMessage `json:"capabilities"`
	SessionID    string          `json:"sessionId"`
}

// status is handler/Status: StatusModel{ready, message, build{version, versionCode}}.
func (s *server) status(*request) (any, error) {
	return map[string]any{
		"ready":   true,
		"message": "UiAutomator2 Server is ready to accept commands",
		"build":   map[string]any{"version": serverVersion, "versionCode": serverVersionCode},
	}, nil
}

// sessions is handler/GetSessions: [] or [{"id", "capabilities"}].
func (s *server) sessions(*request) (any, error) {
	cur := s.currentSession()
	if cur == nil {
		return []any{}, nil
	}
	return []any{map[string]any{"id": cur.id, "capabilities": cur.caps}}, nil
}

// newSession is handler/NewSession: it replaces any current session (the driver
// relies on that), answers SessionModel with the request's capabilities object.
func (s *server) newSession(q *request) (any, error) {
	var body struct {
		Capabilities json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(q.body, &body); err != nil {
		return nil, errSessionNotCreated(err.Error())
	}
	var w3c struct {
		AlwaysMatch map[string]any   `json:"alwaysMatch"`
		FirstMatch  []map[string]any `json:"firstMatch"`
	}
	if len(body.Capabilities) == 0 || body.Capabilities[0] != '{' || json.Unmarshal(body.Capabilities, &w3c) != nil {
		return nil, errSessionNotCreated(errInvalidArgument("'capabilities' are mandatory for session creation").Error())
	}
	caps := map[string]any{}
	// W3CCapsUtils.parseCapabilities: alwaysMatch merged with the first firstMatch
	// entry, vendor prefixes dropped.
	merge := func(m map[string]any) {
		for k, v := range m {
			if i := strings.Index(k, ":"); i >= 0 {
				k = k[i+1:]
			}
			caps[k] = v
		}
	}
	merge(w3c.AlwaysMatch)
	if len(w3c.FirstMatch) > 0 {
		merge(w3c.FirstMatch[0])
	}
	sess := &session{
		id: newUUID(), caps: caps, rawCaps: body.Capabilities,
		settings: map[string]any{}, elements: map[string]elemRef{}, byKey: map[string]string{},
	}
	s.mu.Lock()
	s.sess = sess
	s.mu.Unlock()
	return sessionModel{Capabilities: sess.rawCaps, SessionID: sess.id}, nil
}

// sessionDetails is handler/GetSessionDetails: the session's capabilities.
func (s *server) sessionDetails(*request) (any, error) {
	return s.currentSession().caps, nil
}

// deleteSession is handler/DeleteSession.
func (s *server) deleteSession(q *request) (any, error) {
	id := q.params["sessionId"]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil || s.sess.id != id {
		return nil, errInvalidSession(fmt.Sprintf("The session %s cannot be found", id))
	}
	s.sess = nil
	return nil, nil
}

// source is handler/Source: the XML page source as a string.
func (s *server) source(*request) (any, error) {
	return s.snapshot().xml(false), nil
}

func (s *server) screenshot(*request) (any, error) {
	// A device that renders its screen (the simulated device: the same PNG
	// as `screencap -p`) answers with it; otherwise the wireframe.
	if sv, ok := s.view.(interface{ ScreenshotPNG() ([]byte, error) }); ok {
		b, err := sv.ScreenshotPNG()
		if err != nil {
			return nil, errUnknown(err.Error())
		}
		return base64.StdEncoding.EncodeToString(b), nil
	}
	return screenshotPNGBase64(s.snapshot())
}

// windowSize is handler/GetDeviceSize: SizeModel{width, height} of the display.
func (s *server) windowSize(*request) (any, error) {
	w, h, _ := s.view.DisplaySize()
	return map[string]int{"width": w, "height": h}, nil
}

// orientation is handler/GetOrientation; the simulated display never rotates.
func (s *server) orientation(*request) (any, error) { return "PORTRAIT", nil }

// pixelRatio is handler/GetDevicePixelRatio: DisplayMetrics.density (dpi/160).
func (s *server) pixelRatio(*request) (any, error) {
	_, _, dpi := s.view.DisplaySize()
	return float64(dpi) / 160, nil
}

// displayDensity is the densityDpi.
func (s *server) displayDensity(*request) (any, error) {
	_, _, dpi := s.view.DisplaySize()
	return dpi, nil
}

// systemBars is handler/GetSystemBars: {"statusBar": status_bar_height in px}.
// The framework dimen is 24dp on the phone images modelled here; it is converted
// the way getDimensionPixelSize does (rounded to the nearest pixel).
func (s *server) systemBars(*request) (any, error) {
	_, _, dpi := s.view.DisplaySize()
	return map[string]int{"statusBar": int(24*float64(dpi)/160 + 0.5)}, nil
}

// deviceInfo is handler/GetDeviceInfo: DeviceInfoModel, fields in the order the
// handler fills them. bluetooth is left out (null, which Gson omits) and networks
// is empty: the simulated device has neither.
func (s *server) deviceInfo(*request) (any, error) {
	v := s.view
	w, h, dpi := v.DisplaySize()
	var carrier any
	if c := v.Prop("gsm.operator.alpha"); c != "" {
		carrier = c
	}
	locale := v.Prop("persist.sys.locale")
	if locale == "" {
		locale = v.Prop("ro.product.locale")
	}
	if locale == "" {
		locale = "en-US"
	}
	tz := v.Prop("persist.sys.timezone")
	if tz == "" {
		tz = "GMT"
	}
	return orderedMap{
		{"androidId", androidID(v.Prop("ro.serialno"))},
		{"manufacturer", v.Prop("ro.product.manufacturer")},
		{"model", v.Prop("ro.product.model")},
		{"brand", v.Prop("ro.product.brand")},
		{"apiVersion", strconv.Itoa(v.APILevel())},
		{"platformVersion", v.Prop("ro.build.version.release")},
		{"carrierName", carrier},
		{"realDisplaySize", fmt.Sprintf("%dx%d", w, h)},
		{"displayDensity", dpi},
		{"networks", []any{}},
		// Locale.toString: language_COUNTRY.
		{"locale", strings.ReplaceAll(locale, "-", "_")},
		{"timeZone", tz},
	}, nil
}

// androidID stands in for Settings.Secure.ANDROID_ID (16 hex digits), stable per
// serial number.
func androidID(serial string) string {
	sum := sha256.Sum256([]byte("android_id:" + serial))
	return hex.EncodeToString(sum[:8])
}

// orderedMap marshals as a JSON object with its keys in order.
type orderedMap []struct {
	k string
	v any
}

func (m orderedMap) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, kv := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv.k)
		v, err := json.Marshal(kv.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// getSettings is handler/GetSettings: the settings the driver has set.
func (s *server) getSettings(*request) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]any, len(s.sess.settings))
	for k, v := range s.sess.settings {
		out[k] = v
	}
	return out, nil
}

// updateSettings is handler/UpdateSettings: body {"settings": {...}}.
func (s *server) updateSettings(q *request) (any, error) {
	var body struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(q.body, &body); err != nil || body.Settings == nil {
		return nil, errInvalidArgument("'settings' are mandatory")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range body.Settings {
		s.sess.settings[k] = v
	}
	return nil, nil
}
