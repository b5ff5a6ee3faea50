package android

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// ParseProfile decodes a profile from YAML or JSON bytes (see LoadProfile);
// name labels errors and becomes the profile's name when it has none.
func ParseProfile(name string, b []byte) (Profile, error) {
	return ParseProfileOver(Profile{}, name, b)
}

// ParseProfileOver decodes a profile over base: a field the document sets
// replaces base's (a list replaces the whole list; maps such as props and the
// faults block merge key by key), a field it leaves out keeps base's value.
// So a profile file may say only what it changes from the default profile.
// The name is the document's, else name (never base's).
func ParseProfileOver(base Profile, name string, b []byte) (Profile, error) {
	p := base
	p.Name = ""
	if base.Props != nil {
		p.Props = make(map[string]string, len(base.Props))
		for k, v := range base.Props {
			p.Props[k] = v
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return Profile{}, fmt.Errorf("profile %s: %w", name, err)
	}
	if p.Name == "" {
		p.Name = name
	}
	return p, nil
}
