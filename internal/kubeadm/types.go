package kubeadm

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// The documents kubeadm reads (kubeadm.k8s.io/v1beta4) and the kubelet's
// configuration, as both clusters write them: the appliance's single node
// (Render) and the application cluster's nodes (internal/bpa/install). One
// set of types, so that a field the two share is written one way.

// API is kubeadm's configuration API.
const API = "kubeadm.k8s.io/v1beta4"

// TypeMeta is a document's apiVersion and kind.
type TypeMeta struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
}

// Arg is one of kubeadm's extra arguments (v1beta4's name and value).
type Arg struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// Volume is a host folder mounted into a control-plane component.
type Volume struct {
	Name      string `yaml:"name"`
	HostPath  string `yaml:"hostPath"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
	PathType  string `yaml:"pathType"`
}

// NodeRegistration is how a node registers. Taints nil keeps kubeadm's
// default (a control-plane taint on a master); an empty list leaves the
// node untainted.
type NodeRegistration struct {
	Name                  string    `yaml:"name"`
	CRISocket             string    `yaml:"criSocket"`
	ImagePullPolicy       string    `yaml:"imagePullPolicy,omitempty"`
	IgnorePreflightErrors []string  `yaml:"ignorePreflightErrors,omitempty"`
	Taints                *[]string `yaml:"taints,omitempty"`
	KubeletExtraArgs      []Arg     `yaml:"kubeletExtraArgs"`
}

// APIEndpoint is where a control-plane node's API server answers.
type APIEndpoint struct {
	AdvertiseAddress string `yaml:"advertiseAddress"`
	BindPort         int    `yaml:"bindPort"`
}

// Timeouts are kubeadm's waits (unset: kubeadm's default).
type Timeouts struct {
	ControlPlaneComponentHealthCheck string `yaml:"controlPlaneComponentHealthCheck,omitempty"`
	KubeletHealthCheck               string `yaml:"kubeletHealthCheck,omitempty"`
	KubernetesAPICall                string `yaml:"kubernetesAPICall,omitempty"`
	EtcdAPICall                      string `yaml:"etcdAPICall,omitempty"`
	TLSBootstrap                     string `yaml:"tlsBootstrap,omitempty"`
	Discovery                        string `yaml:"discovery,omitempty"`
}

// Patches names the folder of patches kubeadm applies to the static Pods
// it writes (StallPatches).
type Patches struct {
	Directory string `yaml:"directory"`
}

// InitConfiguration is kubeadm init's node.
type InitConfiguration struct {
	TypeMeta         `yaml:",inline"`
	NodeRegistration NodeRegistration `yaml:"nodeRegistration"`
	LocalAPIEndpoint APIEndpoint      `yaml:"localAPIEndpoint"`
	Timeouts         Timeouts         `yaml:"timeouts"`
	Patches          *Patches         `yaml:"patches,omitempty"`
}

// ImageMeta names a component's image apart from the cluster's.
type ImageMeta struct {
	ImageRepository string `yaml:"imageRepository,omitempty"`
	ImageTag        string `yaml:"imageTag,omitempty"`
}

// Component is a control-plane component's extra arguments.
type Component struct {
	ExtraArgs []Arg `yaml:"extraArgs"`
}

// ClusterConfiguration is the cluster kubeadm init makes, which kubeadm
// keeps in the kubeadm-config ConfigMap: a control-plane join builds its
// static pods from it.
type ClusterConfiguration struct {
	TypeMeta             `yaml:",inline"`
	ClusterName          string `yaml:"clusterName"`
	KubernetesVersion    string `yaml:"kubernetesVersion"`
	ControlPlaneEndpoint string `yaml:"controlPlaneEndpoint"`
	ImageRepository      string `yaml:"imageRepository,omitempty"`
	EncryptionAlgorithm  string `yaml:"encryptionAlgorithm"`
	Networking           struct {
		PodSubnet     string `yaml:"podSubnet"`
		ServiceSubnet string `yaml:"serviceSubnet,omitempty"`
		DNSDomain     string `yaml:"dnsDomain,omitempty"`
	} `yaml:"networking"`
	Etcd struct {
		Local struct {
			ImageMeta `yaml:",inline"`
			DataDir   string `yaml:"dataDir,omitempty"`
			ExtraArgs []Arg  `yaml:"extraArgs"`
		} `yaml:"local"`
	} `yaml:"etcd"`
	DNS       ImageMeta `yaml:"dns,omitempty"`
	APIServer struct {
		CertSANs     []string `yaml:"certSANs,omitempty"`
		ExtraArgs    []Arg    `yaml:"extraArgs,omitempty"`
		ExtraVolumes []Volume `yaml:"extraVolumes,omitempty"`
	} `yaml:"apiServer"`
	ControllerManager Component `yaml:"controllerManager"`
	Scheduler         Component `yaml:"scheduler"`
}

// NewClusterConfiguration is a cluster with the settings both clusters
// share: cheap keys (KeyAlgorithm), etcd's and the controllers' timing for
// slow machines (EtcdArgs, LeaderElectionArgs), and Secrets encrypted at
// rest with the EncryptionConfiguration at encryptionConfig, a file on the
// node (EncryptionAPIServer).
func NewClusterConfiguration(name, version, endpoint, encryptionConfig string) ClusterConfiguration {
	cc := ClusterConfiguration{TypeMeta: TypeMeta{API, "ClusterConfiguration"}, ClusterName: name, KubernetesVersion: version,
		ControlPlaneEndpoint: endpoint, EncryptionAlgorithm: KeyAlgorithm}
	cc.Etcd.Local.ExtraArgs = EtcdArgs()
	cc.APIServer.ExtraArgs, cc.APIServer.ExtraVolumes = EncryptionAPIServer(encryptionConfig)
	cc.APIServer.ExtraArgs = append(cc.APIServer.ExtraArgs, APIServerArgs()...)
	cc.ControllerManager.ExtraArgs = LeaderElectionArgs()
	cc.Scheduler.ExtraArgs = LeaderElectionArgs()
	return cc
}

// JoinConfiguration is kubeadm join's node; ControlPlane is set for a
// master.
type JoinConfiguration struct {
	TypeMeta         `yaml:",inline"`
	NodeRegistration NodeRegistration `yaml:"nodeRegistration"`
	Discovery        struct {
		BootstrapToken struct {
			APIServerEndpoint string   `yaml:"apiServerEndpoint"`
			Token             string   `yaml:"token"`
			CACertHashes      []string `yaml:"caCertHashes"`
		} `yaml:"bootstrapToken"`
	} `yaml:"discovery"`
	ControlPlane *JoinControlPlane `yaml:"controlPlane,omitempty"`
	Timeouts     Timeouts          `yaml:"timeouts"`
	Patches      *Patches          `yaml:"patches,omitempty"`
}

// JoinControlPlane is a master's part of a join.
type JoinControlPlane struct {
	LocalAPIEndpoint APIEndpoint `yaml:"localAPIEndpoint"`
	CertificateKey   string      `yaml:"certificateKey"`
}

// KubeletConfiguration is the kubelet's (kubelet.config.k8s.io/v1beta1).
type KubeletConfiguration struct {
	TypeMeta                 `yaml:",inline"`
	CgroupDriver             string `yaml:"cgroupDriver"`
	ContainerRuntimeEndpoint string `yaml:"containerRuntimeEndpoint,omitempty"`
	FailSwapOn               *bool  `yaml:"failSwapOn,omitempty"`
	// EvictionHard, when set, replaces the kubelet's thresholds.
	EvictionHard map[string]string `yaml:"evictionHard,omitempty"`
}

// NewKubeletConfiguration is a kubelet with cgroupDriver.
func NewKubeletConfiguration(cgroupDriver string) KubeletConfiguration {
	return KubeletConfiguration{TypeMeta: TypeMeta{"kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"}, CgroupDriver: cgroupDriver}
}

// Marshal writes docs as one YAML stream, after header (comment lines,
// each ending in a newline; "" for none).
func Marshal(header string, docs ...any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header)
	for i, doc := range docs {
		if i > 0 {
			b.WriteString("---\n")
		}
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(doc); err != nil {
			return nil, fmt.Errorf("rendering kubeadm config: %w", err)
		}
		if err := enc.Close(); err != nil {
			return nil, fmt.Errorf("rendering kubeadm config: %w", err)
		}
	}
	return b.Bytes(), nil
}
