package vsite

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

var bootTargets = []string{bootNone, bootPxe, bootHdd, bootCd}

// Ids of the System's parts, and what the System says it is.
const (
	processorID  = "cpu0"
	storageID    = "scsi"
	driveID      = "sda"
	nicIDPrefix  = "nic"
	legacyMode   = "Legacy"
	uefiMode     = "UEFI"
	machineModel = "bootstick vsite QEMU machine"
)

func bootMode(st machineState) string {
	if st.UEFI {
		return uefiMode
	}
	return legacyMode
}

// state reads the machine; a failure answers 500.
func (b *redfishBMC) state(w http.ResponseWriter, r *http.Request) (machineState, bool) {
	st, err := b.drv.State(r.Context())
	if err != nil {
		redfishError(w, http.StatusInternalServerError, fmt.Sprintf("machine %s: %v", b.name, err))
		return st, false
	}
	return st, true
}

func (b *redfishBMC) systems(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, collection("#ComputerSystemCollection.ComputerSystemCollection", "/redfish/v1/Systems", "Computer Systems", systemPath(b.name)))
}

func (b *redfishBMC) system(w http.ResponseWriter, r *http.Request) {
	if !b.thisSystem(w, r) {
		return
	}
	st, ok := b.state(w, r)
	if !ok {
		return
	}
	enabled := b.bootEnabled()
	path := systemPath(b.name)
	power, firmware := "Off", "SeaBIOS"
	if st.PowerOn {
		power = "On"
	}
	if st.UEFI {
		firmware = "OVMF"
	}
	tag := etag(enabled, st)
	w.Header().Set("ETag", tag)
	w.Header().Set("Allow", "GET, PATCH")
	sys := obj{
		"@odata.type":  "#ComputerSystem.v1_13_0.ComputerSystem",
		"@odata.id":    path,
		"@odata.etag":  tag,
		"Id":           b.name,
		"Name":         b.name,
		"UUID":         st.UUID,
		"Manufacturer": "bootstick",
		"Model":        machineModel,
		"SerialNumber": b.name,
		"SystemType":   "Physical",
		"BiosVersion":  firmware,
		"Status":       enabledOK,
		"PowerState":   power,
		"Boot": obj{
			"BootSourceOverrideTarget":                          st.BootTarget,
			"BootSourceOverrideTarget@Redfish.AllowableValues":  bootTargets,
			"BootSourceOverrideEnabled":                         enabled,
			"BootSourceOverrideEnabled@Redfish.AllowableValues": bootEnabled,
			"BootSourceOverrideMode":                            bootMode(st),
			"BootSourceOverrideMode@Redfish.AllowableValues":    []string{bootMode(st)},
		},
		"ProcessorSummary":   obj{"Count": st.CPUs, "Model": "QEMU Virtual CPU", "Status": enabledOK},
		"MemorySummary":      obj{"TotalSystemMemoryGiB": float64(st.MemoryMiB) / 1024, "Status": enabledOK},
		"Processors":         link(path + "/Processors"),
		"EthernetInterfaces": link(path + "/EthernetInterfaces"),
		"SimpleStorage":      link(path + "/SimpleStorage"),
		"Storage":            link(path + "/Storage"),
		"Links": obj{
			"ManagedBy": []obj{link(managerPath)},
			"Chassis":   []obj{link(chassisPath)},
		},
		"Actions": obj{"#ComputerSystem.Reset": obj{
			"target":                            path + "/Actions/ComputerSystem.Reset",
			"ResetType@Redfish.AllowableValues": redfishResetTypes,
		}},
	}
	if st.SecureBootCapable {
		sys["SecureBoot"] = link(secureBootPath(b.name))
	}
	writeJSON(w, http.StatusOK, sys)
}

func (b *redfishBMC) nics(w http.ResponseWriter, r *http.Request) {
	if !b.thisSystem(w, r) {
		return
	}
	st, ok := b.state(w, r)
	if !ok {
		return
	}
	var paths []string
	for i := range st.MACs {
		paths = append(paths, systemPath(b.name)+"/EthernetInterfaces/"+nicIDPrefix+strconv.Itoa(i))
	}
	writeJSON(w, http.StatusOK, collection("#EthernetInterfaceCollection.EthernetInterfaceCollection", systemPath(b.name)+"/EthernetInterfaces", "Ethernet Interfaces", paths...))
}

func (b *redfishBMC) nic(w http.ResponseWriter, r *http.Request) {
	if !b.thisSystem(w, r) {
		return
	}
	st, ok := b.state(w, r)
	if !ok {
		return
	}
	id := r.PathValue("nic")
	i, err := strconv.Atoi(strings.TrimPrefix(id, nicIDPrefix))
	if !strings.HasPrefix(id, nicIDPrefix) || err != nil || i < 0 || i >= len(st.MACs) {
		redfishError(w, http.StatusNotFound, "no ethernet interface "+id)
		return
	}
	writeJSON(w, http.StatusOK, obj{
		"@odata.type":         "#EthernetInterface.v1_4_0.EthernetInterface",
		"@odata.id":           systemPath(b.name) + "/EthernetInterfaces/" + id,
		"Id":                  id,
		"Name":                "NIC " + strconv.Itoa(i),
		"MACAddress":          st.MACs[i],
		"PermanentMACAddress": st.MACs[i],
		"SpeedMbps":           1000,
		"LinkStatus":          "LinkUp",
		"Status":              enabledOK,
	})
}

// onePart answers the collection at the System's sub path, whose one
// member is id.
func (b *redfishBMC) onePart(typ, sub, id string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !b.thisSystem(w, r) {
			return
		}
		path := systemPath(b.name) + "/" + sub
		writeJSON(w, http.StatusOK, collection(typ, path, sub, path+"/"+id))
	}
}

func (b *redfishBMC) processor(w http.ResponseWriter, r *http.Request) {
	if !b.thisSystem(w, r, "cpu", processorID) {
		return
	}
	st, ok := b.state(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, obj{
		"@odata.type":           "#Processor.v1_9_0.Processor",
		"@odata.id":             systemPath(b.name) + "/Processors/" + processorID,
		"Id":                    processorID,
		"Name":                  "CPU 0",
		"Socket":                "CPU 0",
		"ProcessorType":         "CPU",
		"ProcessorArchitecture": "x86",
		"InstructionSet":        "x86-64",
		"Model":                 "QEMU Virtual CPU",
		"TotalCores":            st.CPUs,
		"TotalThreads":          st.CPUs,
		"Status":                enabledOK,
	})
}

func (b *redfishBMC) simpleStorage(w http.ResponseWriter, r *http.Request) {
	if !b.thisSystem(w, r, "ctl", storageID) {
		return
	}
	st, ok := b.state(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, obj{
		"@odata.type": "#SimpleStorage.v1_2_0.SimpleStorage",
		"@odata.id":   systemPath(b.name) + "/SimpleStorage/" + storageID,
		"Id":          storageID,
		"Name":        "SCSI controller",
		"Status":      enabledOK,
		"Devices":     []obj{{"Name": driveID, "CapacityBytes": st.DiskBytes, "Status": enabledOK}},
	})
}

func (b *redfishBMC) storage(w http.ResponseWriter, r *http.Request) {
	if !b.thisSystem(w, r, "ctl", storageID) {
		return
	}
	path := systemPath(b.name) + "/Storage/" + storageID
	writeJSON(w, http.StatusOK, obj{
		"@odata.type": "#Storage.v1_8_0.Storage",
		"@odata.id":   path,
		"Id":          storageID,
		"Name":        "SCSI controller",
		"Status":      enabledOK,
		"Drives":      []obj{link(path + "/Drives/" + driveID)},
	})
}

func (b *redfishBMC) drive(w http.ResponseWriter, r *http.Request) {
	if !b.thisSystem(w, r, "ctl", storageID, "drive", driveID) {
		return
	}
	st, ok := b.state(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, obj{
		"@odata.type":   "#Drive.v1_6_0.Drive",
		"@odata.id":     systemPath(b.name) + "/Storage/" + storageID + "/Drives/" + driveID,
		"Id":            driveID,
		"Name":          driveID,
		"CapacityBytes": st.DiskBytes,
		"MediaType":     "HDD",
		"Protocol":      "SAS",
		"Status":        enabledOK,
	})
}
