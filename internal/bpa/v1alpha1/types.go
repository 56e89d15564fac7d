// Package v1alpha1 is the Provisioning kind of the Akraino ICN binary
// provisioning agent (BPA), group bpa.akraino.org: which hosts make a
// cluster's masters and workers, keyed by host name with their boot MAC
// addresses and resource needs, as the original BPA CRD has them, plus a
// status that tells each host's progress; and the ContainerPackages kind:
// the add-ons to install on that cluster.
//
// +kubebuilder:object:generate=true
// +groupName=bpa.akraino.org
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is bpa.akraino.org/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "bpa.akraino.org", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the kinds of this group.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the kinds of this group to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Provisioning{}, &ProvisioningList{}, &ContainerPackages{}, &ContainerPackagesList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// ProvisioningSpec is the cluster to build: its masters and workers, keyed
// by host name, the KUD plugins to install and the pod subnet. Field names
// are those of the original BPA CRD.
// +kubebuilder:validation:XValidation:rule="has(self.controlPlaneVIP) == has(oldSelf.controlPlaneVIP) && (!has(self.controlPlaneVIP) || self.controlPlaneVIP == oldSelf.controlPlaneVIP)",message="controlPlaneVIP cannot change: kubeadm made it (or the first master's address, without one) the cluster's endpoint when it made the cluster"
type ProvisioningSpec struct {
	// Masters are the control-plane hosts, each a one-entry map from the
	// host's name to its boot MAC address and resources.
	// +optional
	Masters []map[string]Master `json:"masters,omitempty"`
	// Workers are the worker hosts, keyed by name like Masters.
	// +optional
	Workers []map[string]Worker `json:"workers,omitempty"`
	// KUDPlugins are the Kubernetes Deployment (KUD) add-ons to install.
	// +optional
	KUDPlugins []string `json:"KUDPlugins,omitempty"`
	// PodSubnet is the cluster's pod CIDR.
	// +optional
	PodSubnet string `json:"PodSubnet,omitempty"`
	// ControlPlaneVIP is the control plane's virtual IPv4 address, held by
	// keepalived on the masters and made the cluster's
	// controlPlaneEndpoint (the site's cluster.controlPlaneVIP). Empty:
	// the first master's address is the endpoint. It cannot be set,
	// changed or removed once the Provisioning exists.
	// +kubebuilder:validation:Pattern=`^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$`
	// +kubebuilder:validation:MaxLength=15
	// +optional
	ControlPlaneVIP string `json:"controlPlaneVIP,omitempty"`
}

// Master is a control-plane host's boot MAC address and resources. A
// master is matched on cpu and memory only (see Worker).
type Master struct {
	// +kubebuilder:validation:Pattern=`^([0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2}$`
	MACaddress string `json:"mac-address,omitempty"`
	// CPU is the fewest logical CPUs the host's inspected hardware
	// (its BareMetalHost's status.hardwareDetails.cpu.count) may have.
	// +kubebuilder:validation:Minimum=0
	// +optional
	CPU int32 `json:"cpu,omitempty"`
	// Memory is the least memory, a quantity such as 64Gi, the host's
	// inspected hardware (status.hardwareDetails.ramMebibytes) may have.
	// One that is not a quantity leaves the host Unfit, saying so.
	// +optional
	Memory string `json:"memory,omitempty"`
}

// Worker is a worker host's boot MAC address and resources. The BPA
// installs a host only once its hardware has them (role matching); a
// host that lacks any is Unfit, with what it lacks in its status.
type Worker struct {
	// +kubebuilder:validation:Pattern=`^([0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2}$`
	MACaddress string `json:"mac-address,omitempty"`
	// CPU is the fewest logical CPUs the host's inspected hardware may
	// have, as a Master's.
	// +kubebuilder:validation:Minimum=0
	// +optional
	CPU int32 `json:"cpu,omitempty"`
	// Memory is the least memory the host's inspected hardware may have,
	// as a Master's.
	// +optional
	Memory string `json:"memory,omitempty"`
	// SRIOV: a NIC of the host offers SR-IOV virtual functions (its
	// sysfs sriov_totalvfs is above 0), as read on the host.
	// +optional
	SRIOV bool `json:"sriov,omitempty"`
	// QAT: the host has an Intel QuickAssist physical function of a
	// kind the Linux kernel's qat drivers bind, as read on the host.
	// +optional
	QAT bool `json:"qat,omitempty"`
}

// HostState is where one host of a Provisioning is.
// +kubebuilder:validation:Enum=Pending;Matched;Provisioning;Provisioned;Installing;Unreachable;Unfit;Ready;Error
type HostState string

// The states a host goes through.
const (
	// HostPending: no BareMetalHost with the host's MAC address yet.
	HostPending HostState = "Pending"
	// HostMatched: a BareMetalHost has the MAC address.
	HostMatched HostState = "Matched"
	// HostProvisioning: the OS is being written.
	HostProvisioning HostState = "Provisioning"
	// HostProvisioned: the OS runs; the host can join the cluster.
	HostProvisioned HostState = "Provisioned"
	// HostInstalling: the BPA installs the packages and joins the host to
	// the cluster (see Phases).
	HostInstalling HostState = "Installing"
	// HostUnreachable: the BPA cannot reach the host over SSH and retries
	// with backoff (see Error and NextRetry).
	HostUnreachable HostState = "Unreachable"
	// HostUnfit: the host's hardware lacks what its entry in masters or
	// workers requires (cpu, memory, sriov, qat); Error says what. The
	// BPA installs nothing on it until it fits.
	HostUnfit HostState = "Unfit"
	// HostReady: the host is a Ready node of the cluster.
	HostReady HostState = "Ready"
	// HostError: see Error.
	HostError HostState = "Error"
)

// Install phases, in order.
const (
	PhaseConnect = "connect"
	PhaseInstall = "install"
	// PhaseCleanup removes what a host provisioned again left in the
	// cluster (its Node, its etcd member) before it joins back.
	PhaseCleanup = "cleanup"
	PhaseInit    = "init"
	PhaseJoin    = "join"
	PhaseReady   = "ready"
)

// Phase is one step of installing a host: when it started and when it
// ended.
type Phase struct {
	// Name is connect, install, cleanup (a host provisioned again, before
	// it joins back), init (the first master), join or ready.
	Name    string      `json:"name"`
	Started metav1.Time `json:"started"`
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// Duration is Finished - Started, e.g. "1m12s".
	// +optional
	Duration string `json:"duration,omitempty"`
}

// HostStatus is one host's progress.
type HostStatus struct {
	// Name is the host's key in masters or workers.
	Name string `json:"name"`
	// Role is master or worker.
	// +kubebuilder:validation:Enum=master;worker
	Role string `json:"role"`
	// MACAddress is the boot MAC address the host was matched on.
	// +optional
	MACAddress string `json:"macAddress,omitempty"`
	// BareMetalHost is the name of the matched metal3.io BareMetalHost.
	// +optional
	BareMetalHost string `json:"bareMetalHost,omitempty"`
	// State is where the host is.
	State HostState `json:"state"`
	// Error says what went wrong when State is Error, and what the
	// host's hardware lacks when State is Unfit. It never holds
	// credentials.
	// +optional
	Error string `json:"error,omitempty"`
	// LastUpdated is when State last changed.
	// +optional
	LastUpdated *metav1.Time `json:"lastUpdated,omitempty"`
	// Address is where the BPA reaches the host over SSH.
	// +optional
	Address string `json:"address,omitempty"`
	// ProvisionedAt is when the BareMetalHost's OS was written (for a host
	// provisioned before the baremetal-operator, externally, when its
	// BareMetalHost was made): the install below is for that
	// provisioning, and a host provisioned again is installed again.
	// +optional
	ProvisionedAt *metav1.Time `json:"provisionedAt,omitempty"`
	// Phases are the install's steps on the host, in order.
	// +optional
	Phases []Phase `json:"phases,omitempty"`
	// Failures counts the install's failed tries in a row; NextRetry is
	// when the BPA tries again.
	// +optional
	Failures int32 `json:"failures,omitempty"`
	// +optional
	NextRetry *metav1.Time `json:"nextRetry,omitempty"`
}

// ProvisioningStatus is what the BPA has done.
type ProvisioningStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Hosts is each host's progress, one entry per name.
	// +listType=map
	// +listMapKey=name
	// +optional
	Hosts []HostStatus `json:"hosts,omitempty"`
	// KubeconfigSecret names the Secret (key "value") holding the
	// application cluster's admin kubeconfig, once the cluster exists.
	// +optional
	KubeconfigSecret string `json:"kubeconfigSecret,omitempty"`
	// Conditions are Ready (every host provisioned), ClusterReady (every
	// host a Ready node) and, once a node was to be removed, NodesRemoved
	// (no node or etcd member of the cluster that no host names).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Provisioning is one cluster the BPA builds on BareMetalHosts.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=provisionings,scope=Namespaced
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Provisioning struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProvisioningSpec   `json:"spec,omitempty"`
	Status ProvisioningStatus `json:"status,omitempty"`
}

// ProvisioningList is a list of Provisionings.
// +kubebuilder:object:root=true
type ProvisioningList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Provisioning `json:"items"`
}
