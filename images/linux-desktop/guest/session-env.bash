# Sourced by every interactive bash (from /etc/bash.bashrc): the variables
# a claim gives this desktop's session (spec.env and spec.envFrom, which
# hvkube writes into /run/hvkube/env after the claim's resume) reach the
# shells already open, before the next command each one runs, and every
# shell opened after. The file's first line changes with each write; when
# the file goes (the claim's release), each shell's variables are put back
# as they were before the claim.
[[ -n ${__hvkube_env_hook-} ]] && return 0
__hvkube_env_hook=1
declare -gA __hvkube_env_saved=() # name -> "set:VALUE" or "unset", before the claim
__hvkube_env_stamp=

__hvkube_env() {
	# Locals of unlikely names: the file's exports must not land in them.
	local __hvkube_f=/run/hvkube/env __hvkube_s= __hvkube_l __hvkube_n
	[[ -r $__hvkube_f ]] && IFS= read -r __hvkube_s <"$__hvkube_f"
	[[ $__hvkube_s == "$__hvkube_env_stamp" ]] && return 0
	for __hvkube_n in "${!__hvkube_env_saved[@]}"; do
		__hvkube_l=${__hvkube_env_saved[$__hvkube_n]}
		if [[ $__hvkube_l == set:* ]]; then
			export "$__hvkube_n=${__hvkube_l#set:}"
		else
			unset -v "$__hvkube_n"
		fi
	done
	__hvkube_env_saved=()
	__hvkube_env_stamp=$__hvkube_s
	[[ -n $__hvkube_s ]] || return 0
	while IFS= read -r __hvkube_l; do
		[[ $__hvkube_l =~ ^export\ ([A-Za-z_][A-Za-z0-9_]*)= ]] || continue
		__hvkube_n=${BASH_REMATCH[1]}
		if [[ -v $__hvkube_n ]]; then
			__hvkube_env_saved[$__hvkube_n]="set:${!__hvkube_n}"
		else
			__hvkube_env_saved[$__hvkube_n]=unset
		fi
	done <"$__hvkube_f"
	# shellcheck source=/dev/null
	. "$__hvkube_f"
}

# Before every command line's commands (a DEBUG trap runs before each
# simple command, ahead of its expansions): one stat and one read of a
# line while nothing changed.
trap '__hvkube_env' DEBUG
