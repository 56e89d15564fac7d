package firstboot

import "github.com/bootstick/bootstick/internal/pipeline"

// hostSteps bring the booted stick (appliance mode) or this Linux host
// (host mode) up as the infra-local-controller. Each step is in a file of
// its own (step_NAME.go).
func hostSteps(n *node) []pipeline.Step {
	return []pipeline.Step{
		preflightStep(n),
		firewallStep(n),
		bundleStep(n),
		clockStep(n),
		dataDiskStep(n),
		registryStep(n),
		containerdStep(n),
		kubeletStep(n),
		kubeadmInitStep(n),
		untaintStep(n),
		cniStep(n),
		manifestsStep(n),
		metal3Step(n),
		siteStep(n),
		readyStep(n),
	}
}

// kindSteps run the same pipeline against a kind cluster: the engine and
// kind replace the data disk, registry, containerd and kubeadm steps, and
// the bundle's images are loaded into the nodes instead of served.
func kindSteps(n *node) []pipeline.Step {
	return []pipeline.Step{
		kindPreflightStep(n),
		bundleStep(n),
		kindClusterStep(n),
		kindImagesStep(n),
		manifestsStep(n),
		metal3Step(n),
		siteStep(n),
		readyStep(n),
	}
}
