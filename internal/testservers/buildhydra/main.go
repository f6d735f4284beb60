// Command buildhydra builds the ORY Hydra the identity tests run against
// (testservers.BuildHydra) and prints its path: `make idp`, so that a test
// run finds it built.
package main

import (
	"fmt"
	"os"

	"github.com/toolmux/toolmux/internal/testservers"
)

func main() {
	bin, err := testservers.BuildHydra()
	if err != nil {
		fmt.Fprintln(os.Stderr, "buildhydra:", err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
