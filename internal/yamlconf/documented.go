package yamlconf

import (
	"reflect"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Undocumented lists the key paths of v's yaml tags ("split.max_batch_items") that an example
// config file b does not show: neither set (at its path) nor written in a comment line ("#
// key:", for a key whose default is "none"). Nested structs are walked, time.Duration is a value.
// The example configs' tests use it, so that a field added cannot go undocumented.
func Undocumented(b []byte, v any) ([]string, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	var out []string
	var walk func(typ reflect.Type, node map[string]any, path string)
	walk = func(typ reflect.Type, node map[string]any, path string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if key == "" || key == "-" {
				continue
			}
			val, ok := node[key]
			if !ok {
				if !regexp.MustCompile(`(?m)^\s*# ` + regexp.QuoteMeta(key) + `:`).Match(b) {
					out = append(out, path+key)
				}
				continue
			}
			if ft := f.Type; ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]() {
				sub, _ := val.(map[string]any)
				walk(ft, sub, path+key+".")
			}
		}
	}
	walk(reflect.TypeOf(v), doc, "")
	return out, nil
}
