package vsite

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// machineDriver is what a Redfish BMC does to its machine: a libvirt
// domain of the site (libvirtMachine), or a fake in the unit tests.
type machineDriver interface {
	State(ctx context.Context) (machineState, error)
	// Reset does resetType, one of redfishResetTypes, and tells whether
	// it started the machine (a new power-on, which reads the boot
	// settings of its definition; a reboot of a running machine does not).
	Reset(ctx context.Context, resetType string) (started bool, err error)
	// SetBootTarget makes target (Pxe, Hdd or Cd) the first boot device
	// from the next power-on.
	SetBootTarget(ctx context.Context, target string) error
	// SetMedia puts file in the CD-ROM drive; "" empties it.
	SetMedia(ctx context.Context, file string) error
	// SetSecureBoot turns Secure Boot on or off from the machine's next
	// power-on or reset (a Secure Boot machine's only).
	SetSecureBoot(ctx context.Context, on bool) error
}

// machineState is what a BMC reads of its machine.
type machineState struct {
	UUID       string
	PowerOn    bool
	BootTarget string // Pxe, Hdd, Cd or None: the device tried first
	UEFI       bool
	MACs       []string // the boot NIC first
	CPUs       int
	MemoryMiB  int
	DiskBytes  int64
	Media      string // the file in the CD-ROM drive; "" when empty
	// SecureBootCapable says the firmware is a Secure Boot build;
	// SecureBoot is its setting from the next power-on, and
	// SecureBootCurrent whether the machine's current (or last) boot
	// had it on.
	SecureBootCapable, SecureBoot, SecureBootCurrent bool
}

// redfishResetTypes are the ComputerSystem.Reset types the BMC takes.
var redfishResetTypes = []string{"On", "ForceOn", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi"}

// redfishBMC is one machine's Redfish BMC: one System, one Manager (with
// a virtual CD) and one Chassis, behind HTTP basic auth or a session,
// both checked against the machine's BMC user and password.
type redfishBMC struct {
	name, user, password string
	drv                  machineDriver
	// mediaDir keeps the image in the virtual CD while it is inserted.
	mediaDir string
	broken   bool
	// fetch gets virtual media images. It verifies an HTTPS image
	// server's certificate against the system's roots (VirtualMedia says
	// VerifyCertificate true).
	fetch *http.Client
	// maxImageBytes bounds a virtual media image: a larger one is refused.
	maxImageBytes int64
	// sessionTimeout ends a session unused that long (the
	// SessionService's SessionTimeout), by the clock now.
	sessionTimeout time.Duration
	now            func() time.Time
	mux            *http.ServeMux

	// domMu orders the changes to the machine: its persistent definition
	// is read, edited and written back.
	domMu sync.Mutex
	// mediaMu orders virtual media actions (an image downloads outside
	// domMu).
	mediaMu sync.Mutex

	mu       sync.Mutex // guards the rest
	sessions map[string]*redfishSession
	nextID   int
	boot     redfishBoot
	media    redfishMedia
}

// redfishMedia is the virtual CD's state.
type redfishMedia struct {
	image string // the URL inserted; "" when none
	file  string
}

func newRedfishBMC(m Machine, drv machineDriver, mediaDir string) *redfishBMC {
	user := m.BMCUser
	if user == "" {
		user = "admin"
	}
	b := &redfishBMC{
		name: m.Name, user: user, password: m.BMCPassword,
		drv: drv, mediaDir: mediaDir, broken: m.BMCBroken,
		fetch: &http.Client{Transport: &http.Transport{
			Proxy: nil, // a BMC reaches the image server itself
			// One download per insertion: an idle connection kept for
			// reuse would outlive the site (and its goroutines with it).
			DisableKeepAlives: true,
		}},
		maxImageBytes:  defaultMaxImageBytes,
		sessionTimeout: defaultSessionTimeout,
		now:            time.Now,
		sessions:       map[string]*redfishSession{},
		boot:           redfishBoot{enabled: overrideContinuous},
	}
	b.routes()
	return b
}

// Paths of the BMC's resources.
const (
	redfishRoot     = "/redfish/v1/"
	managerPath     = "/redfish/v1/Managers/bmc"
	chassisPath     = "/redfish/v1/Chassis/chassis"
	sessionsPath    = "/redfish/v1/SessionService/Sessions"
	virtualCDPath   = managerPath + "/VirtualMedia/Cd"
	insertMediaPath = virtualCDPath + "/Actions/VirtualMedia.InsertMedia"
	ejectMediaPath  = virtualCDPath + "/Actions/VirtualMedia.EjectMedia"
)

func systemPath(name string) string { return "/redfish/v1/Systems/" + url.PathEscape(name) }

func (b *redfishBMC) routes() {
	mux := http.NewServeMux()
	sys := "/redfish/v1/Systems/{id}"
	for pattern, h := range map[string]http.HandlerFunc{
		"GET /redfish":            b.versions,
		"GET /redfish/{$}":        b.versions,
		"GET /redfish/v1":         b.serviceRoot,
		"GET /redfish/v1/{$}":     b.serviceRoot,
		"GET /redfish/v1/Systems": b.systems,
		"GET " + sys:              b.system,
		"PATCH " + sys:            b.patchBoot,
		"POST " + sys + "/Actions/ComputerSystem.Reset": b.reset,
		"GET " + sys + "/SecureBoot":                    b.secureBoot,
		"PATCH " + sys + "/SecureBoot":                  b.patchSecureBoot,
		"GET " + sys + "/EthernetInterfaces":            b.nics,
		"GET " + sys + "/EthernetInterfaces/{nic}":      b.nic,
		"GET " + sys + "/Processors":                    b.onePart("#ProcessorCollection.ProcessorCollection", "Processors", processorID),
		"GET " + sys + "/Processors/{cpu}":              b.processor,
		"GET " + sys + "/SimpleStorage":                 b.onePart("#SimpleStorageCollection.SimpleStorageCollection", "SimpleStorage", storageID),
		"GET " + sys + "/SimpleStorage/{ctl}":           b.simpleStorage,
		"GET " + sys + "/Storage":                       b.onePart("#StorageCollection.StorageCollection", "Storage", storageID),
		"GET " + sys + "/Storage/{ctl}":                 b.storage,
		"GET " + sys + "/Storage/{ctl}/Drives/{drive}":  b.drive,
		"GET /redfish/v1/Managers":                      b.managers,
		"GET " + managerPath:                            b.manager,
		"GET " + managerPath + "/VirtualMedia":          b.virtualMedias,
		"GET " + virtualCDPath:                          b.virtualCD,
		"PATCH " + virtualCDPath:                        b.patchVirtualCD,
		"POST " + insertMediaPath:                       b.insertMedia,
		"POST " + ejectMediaPath:                        b.ejectMedia,
		"GET /redfish/v1/Chassis":                       b.chassisList,
		"GET " + chassisPath:                            b.chassis,
		"GET /redfish/v1/SessionService":                b.sessionService,
		"GET " + sessionsPath:                           b.sessionList,
		"POST " + sessionsPath:                          b.createSession,
		"GET " + sessionsPath + "/{sid}":                b.session,
		"DELETE " + sessionsPath + "/{sid}":             b.deleteSession,
	} {
		mux.HandleFunc(pattern, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		redfishError(w, http.StatusNotFound, "no resource "+r.URL.Path)
	})
	b.mux = mux
}

// ServeHTTP answers a broken BMC's every request with 500, and asks any
// other's for credentials first (the service root, the versions and the
// creation of a session need none).
func (b *redfishBMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("OData-Version", "4.0")
	if b.broken {
		redfishError(w, http.StatusInternalServerError, "this BMC is broken")
		return
	}
	if !public(r) && !b.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="vsite BMC"`)
		redfishError(w, http.StatusUnauthorized, "a valid session or user name and password is required")
		return
	}
	b.mux.ServeHTTP(w, r)
}

func public(r *http.Request) bool {
	switch r.URL.Path {
	case "/redfish", "/redfish/", "/redfish/v1", redfishRoot:
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	case sessionsPath:
		return r.Method == http.MethodPost
	}
	return false
}

// thisSystem checks the request names this BMC's System and, given in
// pairs of path wildcard and Id, the System's one part of each kind
// ("cpu", processorID).
func (b *redfishBMC) thisSystem(w http.ResponseWriter, r *http.Request, parts ...string) bool {
	if r.PathValue("id") != b.name {
		redfishError(w, http.StatusNotFound, "no system "+r.PathValue("id"))
		return false
	}
	for i := 0; i+1 < len(parts); i += 2 {
		if r.PathValue(parts[i]) != parts[i+1] {
			redfishError(w, http.StatusNotFound, "no resource "+r.URL.Path)
			return false
		}
	}
	return true
}

// uuid is the BMC's own UUID, the same for a machine name every time.
func (b *redfishBMC) uuid() string {
	h := sha256.Sum256([]byte("bootstick vsite BMC " + b.name))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func (b *redfishBMC) versions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, obj{"v1": redfishRoot})
}

func (b *redfishBMC) serviceRoot(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, obj{
		"@odata.type":    "#ServiceRoot.v1_5_0.ServiceRoot",
		"@odata.id":      redfishRoot,
		"Id":             "RootService",
		"Name":           "bootstick virtual site BMC",
		"Product":        "bootstick vsite BMC",
		"RedfishVersion": "1.11.0",
		"UUID":           b.uuid(),
		"Systems":        link("/redfish/v1/Systems"),
		"Managers":       link("/redfish/v1/Managers"),
		"Chassis":        link("/redfish/v1/Chassis"),
		"SessionService": link("/redfish/v1/SessionService"),
		"Links":          obj{"Sessions": link(sessionsPath)},
	})
}

func (b *redfishBMC) managers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, collection("#ManagerCollection.ManagerCollection", "/redfish/v1/Managers", "Managers", managerPath))
}

func (b *redfishBMC) manager(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, obj{
		"@odata.type":     "#Manager.v1_10_0.Manager",
		"@odata.id":       managerPath,
		"Id":              "bmc",
		"Name":            "BMC of " + b.name,
		"ManagerType":     "BMC",
		"UUID":            b.uuid(),
		"Model":           "bootstick vsite BMC",
		"FirmwareVersion": "1.0.0",
		"Status":          enabledOK,
		"VirtualMedia":    link(managerPath + "/VirtualMedia"),
		"Links": obj{
			"ManagerForServers": []obj{link(systemPath(b.name))},
			"ManagerForChassis": []obj{link(chassisPath)},
		},
	})
}

func (b *redfishBMC) chassisList(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, collection("#ChassisCollection.ChassisCollection", "/redfish/v1/Chassis", "Chassis", chassisPath))
}

func (b *redfishBMC) chassis(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, obj{
		"@odata.type": "#Chassis.v1_11_0.Chassis",
		"@odata.id":   chassisPath,
		"Id":          "chassis",
		"Name":        "Chassis of " + b.name,
		"ChassisType": "RackMount",
		"Status":      enabledOK,
		"Links": obj{
			"ComputerSystems": []obj{link(systemPath(b.name))},
			"ManagedBy":       []obj{link(managerPath)},
		},
	})
}

// obj is a JSON object of a Redfish answer.
type obj = map[string]any

var enabledOK = obj{"State": "Enabled", "Health": "OK"}

func link(path string) obj { return obj{"@odata.id": path} }

func collection(typ, path, name string, members ...string) obj {
	list := []obj{}
	for _, m := range members {
		list = append(list, link(m))
	}
	return obj{"@odata.type": typ, "@odata.id": path, "Name": name, "Members@odata.count": len(list), "Members": list}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		redfishError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(data)
}

// redfishError answers with a Redfish error, its message where sushy
// reads it (error.message and the extended info).
func redfishError(w http.ResponseWriter, status int, msg string) {
	code := "Base.1.0.GeneralError"
	writeJSONNoFail(w, status, obj{"error": obj{
		"code":    code,
		"message": msg,
		"@Message.ExtendedInfo": []obj{{
			"@odata.type": "#Message.v1_1_1.Message",
			"MessageId":   code,
			"Message":     msg,
			"Severity":    "Critical",
		}},
	}})
}

func writeJSONNoFail(w http.ResponseWriter, status int, v obj) {
	data, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(data)
}

// decodeBody reads a request's JSON body into v, refusing fields v does
// not have. An empty body leaves v as it is.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

// requestTimeout bounds a request's work on the machine (an image
// download included).
const requestTimeout = 10 * time.Minute
