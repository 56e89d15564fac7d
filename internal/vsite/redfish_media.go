package vsite

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// mediaFile is where the inserted image is kept.
func (b *redfishBMC) mediaFile() string {
	return filepath.Join(b.mediaDir, b.name+".cd.iso")
}

func (b *redfishBMC) virtualMedias(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, collection("#VirtualMediaCollection.VirtualMediaCollection", managerPath+"/VirtualMedia", "Virtual Media", virtualCDPath))
}

func (b *redfishBMC) virtualCD(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	m := b.media
	b.mu.Unlock()
	v := obj{
		"@odata.type":       "#VirtualMedia.v1_4_0.VirtualMedia",
		"@odata.id":         virtualCDPath,
		"Id":                "Cd",
		"Name":              "Virtual CD",
		"MediaTypes":        []string{"CD", "DVD"},
		"Image":             nil,
		"ImageName":         "",
		"Inserted":          false,
		"WriteProtected":    true,
		"ConnectedVia":      "NotConnected",
		"VerifyCertificate": true,
		"Actions": obj{
			"#VirtualMedia.InsertMedia": obj{"target": insertMediaPath},
			"#VirtualMedia.EjectMedia":  obj{"target": ejectMediaPath},
		},
	}
	if m.image != "" {
		u, _ := url.Parse(m.image)
		v["Image"], v["ImageName"], v["Inserted"], v["ConnectedVia"] = m.image, path.Base(u.Path), true, "URI"
		v["TransferProtocolType"] = strings.ToUpper(u.Scheme)
	}
	w.Header().Set("Allow", "GET, PATCH")
	writeJSON(w, http.StatusOK, v)
}

// insertRequest is the body of InsertMedia. The image server's
// credentials, if given, are taken and not used (nor kept).
type insertRequest struct {
	Image                string
	Inserted             *bool
	WriteProtected       *bool
	TransferProtocolType string
	TransferMethod       string
	UserName, Password   string
}

func (b *redfishBMC) insertMedia(w http.ResponseWriter, r *http.Request) {
	var req insertRequest
	if err := decodeBody(r, &req); err != nil {
		redfishError(w, http.StatusBadRequest, err.Error())
		return
	}
	b.insert(w, r, req)
}

func (b *redfishBMC) ejectMedia(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if err := decodeBody(r, &req); err != nil {
		redfishError(w, http.StatusBadRequest, err.Error())
		return
	}
	b.eject(w, r)
}

// mediaPatch is the body of a PATCH of the virtual CD: only the
// properties present change. The image server's credentials, if given,
// are taken and not used (nor kept).
type mediaPatch struct {
	Image                optional[string] // null or "" ejects
	Inserted             optional[bool]   // false ejects
	WriteProtected       optional[bool]
	VerifyCertificate    optional[bool]
	TransferProtocolType optional[string]
	TransferMethod       optional[string]
	UserName, Password   optional[string]
}

// optional is a property of a PATCH body, which tells whether it was
// there (null included) from whether it was null.
type optional[T any] struct {
	set, null bool
	v         T
}

func (o *optional[T]) UnmarshalJSON(data []byte) error {
	o.set = true
	if string(data) == "null" {
		o.null = true
		return nil
	}
	return json.Unmarshal(data, &o.v)
}

// patchVirtualCD is the other way to insert and eject, for clients that
// use it (sushy does when a BMC has no InsertMedia action): Image
// inserts; Image null or "", or Inserted false, ejects; a PATCH of other
// properties leaves the medium as it is. Inserting the image that is in
// already changes nothing.
func (b *redfishBMC) patchVirtualCD(w http.ResponseWriter, r *http.Request) {
	var req mediaPatch
	if err := decodeBody(r, &req); err != nil {
		redfishError(w, http.StatusBadRequest, err.Error())
		return
	}
	for _, p := range []struct {
		name string
		o    optional[bool]
	}{{"Inserted", req.Inserted}, {"WriteProtected", req.WriteProtected}, {"VerifyCertificate", req.VerifyCertificate}} {
		if p.o.null {
			redfishError(w, http.StatusBadRequest, p.name+" cannot be null")
			return
		}
	}
	eject := req.Image.set && req.Image.v == "" || req.Inserted.set && !req.Inserted.v
	image := req.Image.v
	b.mu.Lock()
	inserted := b.media.image
	b.mu.Unlock()
	switch {
	case req.WriteProtected.set && !req.WriteProtected.v:
		redfishError(w, http.StatusBadRequest, "WriteProtected false is not supported: a CD is read-only")
	case req.VerifyCertificate.set && !req.VerifyCertificate.v:
		redfishError(w, http.StatusBadRequest, "VerifyCertificate false is not supported: this BMC always verifies an HTTPS image server's certificate")
	case eject && image != "":
		redfishError(w, http.StatusBadRequest, "Inserted false with an Image is not supported: an image given is inserted")
	case eject:
		b.eject(w, r)
	case image != "" && image != inserted:
		b.insert(w, r, insertRequest{Image: image, TransferProtocolType: req.TransferProtocolType.v, TransferMethod: req.TransferMethod.v})
	case req.Inserted.set && inserted == "":
		redfishError(w, http.StatusBadRequest, "Inserted true needs an Image: the virtual CD is empty")
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// insert fetches the image into mediaDir and puts it in the machine's CD
// drive, from now on and (when it runs) at once.
func (b *redfishBMC) insert(w http.ResponseWriter, r *http.Request, req insertRequest) {
	u, err := url.Parse(req.Image)
	switch {
	case req.Image == "":
		redfishError(w, http.StatusBadRequest, "Image is required")
		return
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		redfishError(w, http.StatusBadRequest, "Image must be an http or https URL")
		return
	case req.Inserted != nil && !*req.Inserted:
		redfishError(w, http.StatusBadRequest, "Inserted false is not supported: the image is inserted")
		return
	case req.WriteProtected != nil && !*req.WriteProtected:
		redfishError(w, http.StatusBadRequest, "WriteProtected false is not supported: a CD is read-only")
		return
	case req.TransferMethod != "" && req.TransferMethod != "Upload" && req.TransferMethod != "Stream":
		redfishError(w, http.StatusBadRequest, "TransferMethod must be Upload or Stream")
		return
	}
	b.mediaMu.Lock()
	defer b.mediaMu.Unlock()
	b.mu.Lock()
	inserted := b.media.image
	b.mu.Unlock()
	if inserted != "" {
		redfishError(w, http.StatusBadRequest, "the virtual CD holds an image already: eject it first")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	file := b.mediaFile()
	if err := b.download(ctx, req.Image, file); err != nil {
		redfishError(w, http.StatusBadRequest, fmt.Sprintf("machine %s: virtual media: %v", b.name, err))
		return
	}
	b.domMu.Lock()
	err = b.drv.SetMedia(ctx, file)
	if err != nil {
		// The definition may hold the file already (the running machine
		// failed, or stopped, after it): empty the drive before the file
		// goes, or the machine's next start fails on a missing image. It
		// runs even when the client has gone.
		undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		b.drv.SetMedia(undo, "")
		cancel()
	}
	b.domMu.Unlock()
	if err != nil {
		os.Remove(file)
		redfishError(w, http.StatusInternalServerError, fmt.Sprintf("machine %s: virtual media: %v", b.name, err))
		return
	}
	b.mu.Lock()
	b.media = redfishMedia{image: req.Image, file: file}
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// eject empties the machine's CD drive and removes the image. Ejecting
// an empty drive does nothing.
func (b *redfishBMC) eject(w http.ResponseWriter, r *http.Request) {
	b.mediaMu.Lock()
	defer b.mediaMu.Unlock()
	b.mu.Lock()
	m := b.media
	b.mu.Unlock()
	if m.image == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	b.domMu.Lock()
	err := b.drv.SetMedia(r.Context(), "")
	b.domMu.Unlock()
	if err != nil {
		redfishError(w, http.StatusInternalServerError, fmt.Sprintf("machine %s: virtual media: %v", b.name, err))
		return
	}
	os.Remove(m.file)
	b.mu.Lock()
	b.media = redfishMedia{}
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
