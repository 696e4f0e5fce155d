package oci_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// image is an OCI image in memory: its manifest's digest and every blob
// (the manifest's too) by digest.
type image struct {
	manifest string
	blobs    map[string][]byte
	// files are blobs too large to hold, by digest: their paths.
	files map[string]string
}

// newImage builds an image of one layer: busybox at /bin/busybox with
// its applets hard-linked, and the directories an image has; cmd is its
// config's Cmd.
func newImage(t testing.TB, busybox string, cmd []string) image {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	add := func(h *tar.Header, data []byte) {
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"bin/", "dev/", "etc/", "proc/", "root/", "run/", "sys/", "tmp/", "var/", "home/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		add(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode}, nil)
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: 50}, []byte(fmt.Sprintf("%-49s\n", "root:x:0:0:root:/root:/bin/sh")))
	// The image's own user 101 owns a directory and a file in it, as
	// nginx's image owns /var/cache/nginx.
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "var/cache/", Mode: 0o755}, nil)
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "var/cache/app/", Mode: 0o755, Uid: 101, Gid: 101}, nil)
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "var/cache/app/page", Mode: 0o644, Uid: 101, Gid: 101, Size: 7}, []byte("cached\n"))
	data, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))}, data)
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	applets := strings.Fields(string(list))
	for _, applet := range applets {
		if applet != "busybox" && !strings.ContainsAny(applet, "/[") {
			// Hard links, as busybox's own images have them.
			add(&tar.Header{Typeflag: tar.TypeLink, Name: "bin/" + applet, Linkname: "bin/busybox", Mode: 0o755}, nil)
		}
	}
	if !slices.Contains(applets, "pgrep") {
		// cri-tools' busybox images have pgrep (critest checks with
		// "pgrep sleep" that a timed-out exec is gone); Debian's busybox
		// has pidof, which answers "pgrep NAME" alike, one pid a line.
		script := []byte("#!/bin/sh\nfound=\nfor p in $(pidof \"$1\"); do echo \"$p\"; found=1; done\n[ -n \"$found\" ]\n")
		add(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/pgrep", Mode: 0o755, Size: int64(len(script))}, script)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	img := image{blobs: map[string][]byte{}}
	layerDigest, layerSize := img.put(layer.Bytes())
	cfgDigest, cfgSize := img.putJSON(t, map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}, "Cmd": cmd},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	img.manifest, _ = img.putJSON(t, map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfgDigest, "size": cfgSize},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize}},
	})
	return img
}

// put adds blob b to img and returns its digest and size.
func (img *image) put(b []byte) (string, int) {
	sum := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(sum[:])
	img.blobs[d] = b
	return d, len(b)
}

// putJSON adds v, as JSON, to img (see put).
func (img *image) putJSON(t testing.TB, v any) (string, int) {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return img.put(b)
}

// buildImage writes an OCI image archive (oci-layout, index.json, blobs)
// of newImage, named name, for ctr image import.
func buildImage(t testing.TB, dir, busybox, name string, cmd []string) string {
	img := newImage(t, busybox, cmd)
	out := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ot := tar.NewWriter(f)
	put := func(name string, b []byte) {
		if err := ot.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := ot.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	for d, b := range img.blobs {
		put("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), b)
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": img.manifest, "size": len(img.blobs[img.manifest]),
			"platform":    map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "test"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	put("index.json", index)
	if err := ot.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}
