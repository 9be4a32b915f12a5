// Command olm-validate loads an OLM bundle directory (manifests/ and metadata/) with
// operator-framework's own loader and runs its validators over it: the default bundle
// validators (CSV, CRD, bundle) plus the OperatorHub, standard capabilities and categories,
// good-practices, object and removed-API validators (against the CSV's minKubeVersion). Every error and every warning is
// printed on its own line; the exit status is 1 when there is any of either, so a test can
// treat warnings as failures.
//
//	olm-validate <bundle dir>
package main

import (
	"fmt"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: olm-validate <bundle dir>")
		os.Exit(2)
	}
	bundle, err := manifests.GetBundleFromDir(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: cannot load the bundle %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if bundle == nil || bundle.CSV == nil {
		fmt.Fprintf(os.Stderr, "error: %s holds no ClusterServiceVersion\n", os.Args[1])
		os.Exit(1)
	}
	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.GoodPracticesValidator,
		validation.ObjectValidator,
		validation.AlphaDeprecatedAPIsValidator,
	)
	findings := 0
	for _, result := range validators.Validate(bundle.ObjectsToValidate()...) {
		for _, e := range result.Errors {
			fmt.Printf("ERROR %s: %s\n", result.Name, e.Error())
			findings++
		}
		for _, w := range result.Warnings {
			fmt.Printf("WARNING %s: %s\n", result.Name, w.Error())
			findings++
		}
	}
	fmt.Printf("validated bundle %s (CSV %s, %d objects): %d findings\n",
		os.Args[1], bundle.CSV.GetName(), len(bundle.Objects), findings)
	if findings > 0 {
		os.Exit(1)
	}
}
