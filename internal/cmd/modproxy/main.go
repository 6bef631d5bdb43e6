// Command modproxy writes the repository's Go modules, as a release tagged
// VERSION would publish them, into a directory laid out as a module proxy
// (GOPROXY=file://DIR): for each module its .info, .mod and .zip under
// MODULE/@v/, and a list. With the module cache's own download directory
// behind it for the dependencies, `go install …/cmd/sqsworker@VERSION` and
// `go get` of every module then work offline exactly as they would once
// published: no replace directive, no go.work, real version requirements.
//
//	go run ./internal/cmd/modproxy -version v0.1.0 -out /tmp/proxy
//
// The files of a module are those git tracks under its directory, less the
// directories of nested modules, as the go command's own zips leave them
// out.
package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	version := flag.String("version", "", "the version to publish the modules at, e.g. v0.1.0 (required)")
	out := flag.String("out", "", "the proxy directory to write (required)")
	flag.Parse()
	if *version == "" || *out == "" || !strings.HasPrefix(*version, "v") {
		fmt.Fprintln(os.Stderr, "usage: modproxy -version vX.Y.Z -out DIR")
		os.Exit(2)
	}
	if err := run(*version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// module is one module of the repository.
type module struct {
	dir  string // relative to the repository's root, "." for the root
	path string // the module path
}

func run(version, out string) error {
	files, err := gitFiles()
	if err != nil {
		return err
	}
	var mods []module
	for _, f := range files {
		if path.Base(f) != "go.mod" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		p := modulePath(data)
		if p == "" {
			return fmt.Errorf("%s: no module line", f)
		}
		mods = append(mods, module{dir: path.Dir(f), path: p})
	}
	for _, m := range mods {
		if err := publish(m, mods, files, version, out); err != nil {
			return fmt.Errorf("module %s: %w", m.path, err)
		}
		fmt.Printf("%s@%s\n", m.path, version)
	}
	return nil
}

// gitFiles lists the files git tracks, relative to the repository's root,
// which must be the working directory.
func gitFiles() ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files (run from the repository's root): %w: %s", err, stderr.String())
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// modulePath returns the path on a go.mod's module line.
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// within reports whether file lies in dir ("." is everything).
func within(file, dir string) bool {
	return dir == "." || file == dir || strings.HasPrefix(file, dir+"/")
}

func publish(m module, mods []module, files []string, version, out string) error {
	var nested []string
	for _, o := range mods {
		if o.dir != m.dir && within(o.dir, m.dir) {
			nested = append(nested, o.dir)
		}
	}
	escaped, err := escape(m.path)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	prefix := m.path + "@" + version + "/"
	for _, f := range files {
		if !within(f, m.dir) || slices.ContainsFunc(nested, func(n string) bool { return within(f, n) }) {
			continue
		}
		rel := f
		if m.dir != "." {
			rel = strings.TrimPrefix(f, m.dir+"/")
		}
		info, err := os.Lstat(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // deleted in the working tree
			}
			return err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		w, err := zw.Create(prefix + rel)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	gomod, err := os.ReadFile(path.Join(m.dir, "go.mod"))
	if err != nil {
		return err
	}
	infoJSON, _ := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	for name, data := range map[string][]byte{
		version + ".zip":  buf.Bytes(),
		version + ".mod":  gomod,
		version + ".info": infoJSON,
		"list":            []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// escape escapes a module path as module proxies do: each upper-case letter
// becomes '!' and its lower case.
func escape(p string) (string, error) {
	var b strings.Builder
	for _, r := range p {
		switch {
		case r >= 'A' && r <= 'Z':
			b.WriteByte('!')
			b.WriteRune(r + ('a' - 'A'))
		case r == '!':
			return "", fmt.Errorf("module path %q has a '!'", p)
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}
