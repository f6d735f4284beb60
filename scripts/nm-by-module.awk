# Sums the text symbols of `go tool nm -size BINARY` by module (BENCHMARKS.md §30):
# github.com/OWNER/REPO, HOST/NAME for other hosts, "std" for the standard
# library and the runtime. The binary must have its symbol table, which
# make build's leaves out:
#
#   go build -tags grpcnotrace -o /tmp/toolmux ./cmd/toolmux
#   go tool nm -size /tmp/toolmux | awk -f scripts/nm-by-module.awk | sort -rn
$3 ~ /^[Tt]$/ {
	n = $4; sub(/^(type:\.(eq|hash)\.)?\(?\*?/, "", n)
	k = split(n, e, "/")
	w = (e[1] == "github.com") ? 3 : 2
	if (k < 2 || e[1] !~ /\./) m = "std"
	else { m = e[1]; for (i = 2; i <= w && i <= k; i++) m = m "/" e[i]; sub(/[.(\[][^\/]*$/, "", m) }
	s[m] += $2; t += $2
}
END { for (m in s) printf "%6.2f MB  %s\n", s[m] / 1e6, m; printf "%6.2f MB  (all)\n", t / 1e6 }
