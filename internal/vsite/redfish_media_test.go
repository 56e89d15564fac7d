package vsite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

type mediaFailsMachine struct{ fakeMachine }

func (f *mediaFailsMachine) SetMedia(ctx context.Context, file string) error {
	f.fakeMachine.SetMedia(ctx, file)
	if file != "" {
		return errors.New("domain is not running")
	}
	return nil
}

// A failed InsertMedia leaves the drive empty, no file behind and the
// virtual CD not inserted: a cut-off download, an HTTPS image server
// whose certificate is not trusted (the BMC verifies it), a drive that
// does not take the image, or an image larger than the BMC takes, whether
// its size comes first (Content-Length) or not; the same through a PATCH.
func TestRedfishBMCFailedInsertLeavesNothing(t *testing.T) {
	m := Machine{Name: "node-0", MAC: "52:54:00:b0:0e:51", BMCUser: "admin", BMCPassword: "pw", BMC: BMCRedfish}
	image := []byte("a whole image")
	cutOff := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000000")
		w.Write(image)
	}))
	t.Cleanup(cutOff.Close)
	// An HTTPS image server whose certificate no trusted CA signed.
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(image) }))
	t.Cleanup(untrusted.Close)
	// An image server that says no size: the headers go before the body
	// (chunked), in two parts.
	sizeless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		w.Write(image[:5])
		w.(http.Flusher).Flush()
		w.Write(image[5:])
	}))
	t.Cleanup(sizeless.Close)
	resp, err := sizeless.Client().Get(sizeless.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ContentLength != -1 {
		t.Fatalf("the sizeless image server says Content-Length %d", resp.ContentLength)
	}
	small := int64(len(image) - 1) // a limit the image is over
	for _, c := range []struct {
		name, url string
		drv       machineDriver
		limit     int64 // the BMC's maxImageBytes, when set
		patch     bool  // PATCH the virtual CD, not InsertMedia
		want      int
		says      string // in the error's message, when set
	}{
		{"cut-off download", cutOff.URL + "/boot.iso", &fakeMachine{}, 0, false, 400, ""},
		{"untrusted image server", untrusted.URL + "/boot.iso", &fakeMachine{}, 0, false, 400, "certificate"},
		{"drive refuses", imageServer(t, image), &mediaFailsMachine{}, 0, false, 500, ""},
		{"image over the limit", imageServer(t, image), &fakeMachine{}, small, false, 400, "limit of 12 bytes"},
		// Refused for the size it says, before its body (cut off) comes.
		{"Content-Length over the limit", cutOff.URL + "/boot.iso", &fakeMachine{}, int64(len(image)), false, 400, "limit of 13 bytes"},
		{"image over the limit, no Content-Length", sizeless.URL + "/boot.iso", &fakeMachine{}, small, false, 400, "limit of 12 bytes"},
		{"image over the limit by PATCH", imageServer(t, image), &fakeMachine{}, small, true, 400, "limit of 12 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, mediaDir := testBMC(t, m, c.drv, func(b *redfishBMC) {
				if c.limit != 0 {
					b.maxImageBytes = c.limit
				}
			})
			method, path, body := "POST", insertMediaPath, map[string]any{"Image": c.url}
			if c.patch {
				method, path, body = "PATCH", virtualCDPath, map[string]any{"Image": c.url, "Inserted": true, "WriteProtected": true}
			}
			a := cl.do(t, method, path, body)
			msg := fmt.Sprint(get(a.body, "error", "message"))
			if a.status != c.want || !strings.Contains(msg, c.says) {
				t.Errorf("InsertMedia answered %d (%s), want %d saying %q", a.status, msg, c.want, c.says)
			}
			if st, _ := c.drv.State(context.Background()); st.Media != "" {
				t.Errorf("the machine's drive holds %s", st.Media)
			}
			if files, _ := os.ReadDir(mediaDir); len(files) != 0 {
				t.Errorf("the failed insertion left %v", files)
			}
			if cd := cl.do(t, "GET", virtualCDPath, nil); get(cd.body, "Inserted") != false {
				t.Errorf("virtual CD after a failed InsertMedia: %v", cd.body)
			}
		})
	}
}

// A PATCH of the virtual CD changes only what it names: an Image inserts
// (as sushy sends it when a BMC has no InsertMedia action), Image null or
// "" or Inserted false ejects (sushy sends Image null and Inserted
// false), and other properties leave the medium in place. Every image
// here is exactly as large as the BMC takes.
func TestRedfishBMCPatchVirtualMedia(t *testing.T) {
	m := Machine{Name: "node-0", MAC: "52:54:00:b0:0e:71", BMCUser: "admin", BMCPassword: "pw", BMC: BMCRedfish}
	image := []byte("an image for the PATCH")
	imageURL := imageServer(t, image)
	for _, c := range []struct {
		name     string
		inserted bool // the CD holds the image at the start
		body     map[string]any
		want     int
		holds    bool // the CD holds the image after
	}{
		{"sushy inserts", false, map[string]any{"Image": imageURL, "Inserted": true, "WriteProtected": true}, 204, true},
		{"sushy inserts with credentials", false, map[string]any{"Image": imageURL, "Inserted": true, "WriteProtected": true,
			"UserName": "u", "Password": "p", "TransferMethod": "Stream"}, 204, true},
		{"Image alone inserts", false, map[string]any{"Image": imageURL}, 204, true},
		{"sushy ejects", true, map[string]any{"Image": nil, "Inserted": false}, 204, false},
		{"Image null ejects", true, map[string]any{"Image": nil}, 204, false},
		{"Image empty ejects", true, map[string]any{"Image": ""}, 204, false},
		{"Inserted false ejects", true, map[string]any{"Inserted": false}, 204, false},
		{"eject an empty CD", false, map[string]any{"Image": nil, "Inserted": false}, 204, false},
		{"WriteProtected alone keeps the medium", true, map[string]any{"WriteProtected": true}, 204, true},
		{"VerifyCertificate alone keeps the medium", true, map[string]any{"VerifyCertificate": true}, 204, true},
		{"Inserted true keeps the medium", true, map[string]any{"Inserted": true}, 204, true},
		{"an empty PATCH keeps the medium", true, map[string]any{}, 204, true},
		{"the same image again", true, map[string]any{"Image": imageURL, "Inserted": true, "WriteProtected": true}, 204, true},
		{"another image into a full CD", true, map[string]any{"Image": imageURL + "?v=2"}, 400, true},
		{"WriteProtected false", true, map[string]any{"WriteProtected": false}, 400, true},
		{"VerifyCertificate false", true, map[string]any{"VerifyCertificate": false}, 400, true},
		{"Image with Inserted false", true, map[string]any{"Image": imageURL, "Inserted": false}, 400, true},
		{"Inserted null", true, map[string]any{"Inserted": nil}, 400, true},
		{"Inserted true into an empty CD", false, map[string]any{"Inserted": true}, 400, false},
		{"an unknown property", true, map[string]any{"Colour": "red"}, 400, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := &fakeMachine{}
			cl, mediaDir := testBMC(t, m, fake, func(b *redfishBMC) { b.maxImageBytes = int64(len(image)) })
			if c.inserted {
				if a := cl.do(t, "POST", insertMediaPath, map[string]any{"Image": imageURL}); a.status != 204 {
					t.Fatalf("InsertMedia: %d %v", a.status, get(a.body, "error", "message"))
				}
			}
			a := cl.do(t, "PATCH", virtualCDPath, c.body)
			if a.status != c.want {
				t.Errorf("PATCH %v: %d, want %d: %v", c.body, a.status, c.want, get(a.body, "error", "message"))
			}
			cd := cl.do(t, "GET", virtualCDPath, nil)
			st, _ := fake.State(context.Background())
			files, _ := os.ReadDir(mediaDir)
			if c.holds {
				data, err := os.ReadFile(st.Media)
				if get(cd.body, "Inserted") != true || get(cd.body, "Image") != imageURL || err != nil || !bytes.Equal(data, image) || len(files) != 1 {
					t.Errorf("the CD does not hold the image: %v; the machine's drive %q (%v); files %v", cd.body, st.Media, err, files)
				}
			} else if get(cd.body, "Inserted") != false || get(cd.body, "Image") != nil || st.Media != "" || len(files) != 0 {
				t.Errorf("the CD is not empty: %v; the machine's drive %q; files %v", cd.body, st.Media, files)
			}
		})
	}
}
