package telegramtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

const maxBody = 64 << 20

// readParams collects a request's parameters from its query string and its body, which may be
// form-urlencoded, JSON or multipart. JSON values other than strings keep their JSON text
// (numbers, booleans, and objects such as reply_parameters), just as form clients send objects
// JSON-serialized. The error, if any, is reported as a 400 after faults had their chance.
func readParams(r *http.Request) (map[string]string, []Upload, []byte, error) {
	params := map[string]string{}
	for k, v := range r.URL.Query() {
		params[k] = v[0]
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return params, nil, body, err
	}
	if len(body) == 0 {
		return params, nil, body, nil
	}
	mt, mp, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			return params, nil, body, errors.New("can't parse JSON object")
		}
		for k, raw := range obj {
			var s string
			switch {
			case json.Unmarshal(raw, &s) == nil:
				params[k] = s
			case string(raw) == "null":
			default:
				params[k] = string(raw)
			}
		}
		return params, nil, body, nil
	case "multipart/form-data":
		var files []Upload
		mr := multipart.NewReader(bytes.NewReader(body), mp["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				return params, files, body, nil
			}
			if err != nil {
				return params, files, body, errors.New("can't parse multipart body")
			}
			v, err := io.ReadAll(part)
			if err != nil {
				return params, files, body, errors.New("can't parse multipart body")
			}
			if part.FileName() != "" {
				files = append(files, Upload{Field: part.FormName(), FileName: part.FileName(),
					ContentType: part.Header.Get("Content-Type"), Data: v})
				continue
			}
			params[part.FormName()] = string(v)
		}
	default:
		q, err := url.ParseQuery(string(body))
		if err != nil {
			return params, nil, body, errors.New("can't parse request body")
		}
		for k, v := range q {
			params[k] = v[0]
		}
		return params, nil, body, nil
	}
}

// intParam returns params[name] as an integer, or 0.
func intParam(params map[string]string, name string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(params[name]), 10, 64)
	return n
}

// optInt parses an optional integer parameter: ok is false when absent; an unparsable value
// is a 400.
func optInt(params map[string]string, name string) (n int64, ok bool, e *apiError) {
	v, ok := params[name]
	if !ok || strings.TrimSpace(v) == "" {
		return 0, false, nil
	}
	v = strings.TrimSpace(v)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, true, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, true, badRequest("invalid %s specified", name)
	}
	return int64(f), true, nil
}

// boolParam reports whether params[name] is true ("true", "1", "True").
func boolParam(params map[string]string, name string) bool {
	b, _ := strconv.ParseBool(strings.TrimSpace(params[name]))
	return b
}
