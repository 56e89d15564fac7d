package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ContainerPackagesSpec names the container packages (add-ons such as
// Multus) to install on the application cluster of a Provisioning: the
// seed's "another CR provided by BPA". The BPA installs them once the
// cluster is Ready, in the order each needs, and removes a package taken
// out of the list.
type ContainerPackagesSpec struct {
	// Cluster is the Provisioning, in this namespace, whose application
	// cluster gets the packages.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cluster cannot change: remove the packages from this one, and name them in another"
	Cluster string `json:"cluster"`
	// Packages are the packages' names, as the stick carries them (the
	// BPA refuses, in this object's status, a name it does not carry).
	// Their order does not matter: each is installed after those it
	// needs.
	// +listType=set
	// +optional
	Packages []string `json:"packages,omitempty"`
}

// PackageState is where one package is.
// +kubebuilder:validation:Enum=Waiting;Installing;Ready;Refused;Failed;Removing
type PackageState string

// The states of a package.
const (
	// PackageWaiting: the cluster is not Ready yet, or a package this one
	// goes after is not (see Message).
	PackageWaiting PackageState = "Waiting"
	// PackageInstalling: its objects are applied and not all ready yet
	// (see Message).
	PackageInstalling PackageState = "Installing"
	// PackageReady: its objects are applied and ready.
	PackageReady PackageState = "Ready"
	// PackageRefused: the stick does not carry it (see Message).
	PackageRefused PackageState = "Refused"
	// PackageFailed: applying or reading it failed; the BPA tries again
	// (see Message).
	PackageFailed PackageState = "Failed"
	// PackageRemoving: taken out of the list, its objects are being
	// deleted.
	PackageRemoving PackageState = "Removing"
)

// PackageStatus is one package's progress.
type PackageStatus struct {
	Name  string       `json:"name"`
	State PackageState `json:"state"`
	// Version is the version the stick carries (its image's tag).
	// +optional
	Version string `json:"version,omitempty"`
	// Message says what it waits for, what is not ready yet, or the last
	// error, in words.
	// +optional
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when State last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// Applied: the BPA has applied its objects to the cluster, so taking
	// it out of the list removes them.
	// +optional
	Applied bool `json:"applied,omitempty"`
}

// ContainerPackagesStatus is what the BPA has done.
type ContainerPackagesStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Packages are the named packages, in the order they are installed,
	// then those being removed.
	// +listType=map
	// +listMapKey=name
	// +optional
	Packages []PackageStatus `json:"packages,omitempty"`
	// Conditions: Ready, every named package Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ContainerPackages is the container packages of one application cluster.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=containerpackages,scope=Namespaced,shortName=cpkg
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ContainerPackages struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ContainerPackagesSpec   `json:"spec,omitempty"`
	Status ContainerPackagesStatus `json:"status,omitempty"`
}

// ContainerPackagesList is a list of ContainerPackages.
// +kubebuilder:object:root=true
type ContainerPackagesList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ContainerPackages `json:"items"`
}
