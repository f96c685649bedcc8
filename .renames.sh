#!/usr/bin/env bash
# .renames.sh applies the renames of issue 34's API naming (RENAMES-api.md
# lists them, old -> new) to every *.go and *.md file of the tree, except
# the CHANGELOG (its past entries keep the names they had) and
# RENAMES-api.md (it lists the old names).
#
# It is idempotent: run it again after a merge that brought code in the old
# names, then build. It rewrites text only; the new homes of the moved types
# (inboxtype), Client.Admin and the removal of the twins are hand edits in
# the history beside it.
#
# Usage, from anywhere inside the tree:  bash .renames.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

GOIMPORTS=${GOIMPORTS:-$(go env GOPATH)/bin/goimports}
if [ ! -x "$GOIMPORTS" ]; then
	echo ".renames.sh: goimports not found at $GOIMPORTS (go install golang.org/x/tools/cmd/goimports@latest, or set GOIMPORTS)" >&2
	exit 1
fi

# A package-qualified name: not preceded by a dot or an identifier
# character, so that a field or variable named inbox or outbox (s.outbox.Stats)
# is left alone.
Q='(?<![.\w])'

script=$(cat <<'PERL'
# 1. Types with one home in inboxtype (their twins in the root, inboxdriver
#    and outbox are gone).
s/${Q}(?:inbox|inboxdriver|inboxtype)\.(?:AdoptParams|PartitionAdoptParams)\b/inboxtype.PartitionAdoptParams/g;
s/${Q}inboxdriver\.DefaultAdopt(LockTimeout|Attempts)\b/inboxtype.DefaultAdopt$1/g;
s/${Q}(?:inbox|inboxdriver)\.(?:MaintainPartitionsParams|PartitionMaintainParams)\b/inboxtype.PartitionMaintainParams/g;
s/${Q}inbox\.(?:ListDeadLettersParams|DeadLetterListParams)\b/inboxtype.DeadLetterListParams/g;
s/${Q}inboxdriver\.DeadLetterListParams\b/inboxtype.DeadLetterListParams/g;
s/${Q}inbox\.(?:ListEffectsParams|EffectListParams)\b/inboxtype.EffectListParams/g;
s/${Q}inboxdriver\.EffectListParams\b/inboxtype.EffectListParams/g;
s/${Q}inbox\.(?:ForgetResult|ForgetCounts)\b/inboxtype.ForgetCounts/g;
s/${Q}inboxdriver\.ForgetCounts\b/inboxtype.ForgetCounts/g;
s/${Q}(?:inbox|inboxdriver)\.OutboxStats\b(?!\()/inboxtype.OutboxStats/g;
s/${Q}outbox\.Stats\b(?!\()/inboxtype.OutboxStats/g;

# 2. Names, noun first (DeadLetterList, as inboxdriver and river's JobList).
#    Unqualified, they cover the root package, its callers and the docs.
s/\bListDeadLettersParams\b/DeadLetterListParams/g;
s/\bReplayDeadLettersParams\b/DeadLetterReplayParams/g;
s/\bListEffectsParams\b/EffectListParams/g;
s/\bResolveEffectParams\b/EffectResolveParams/g;
s/\bMaintainPartitionsParams\b/PartitionMaintainParams/g;
s/\bAdoptParams\b/PartitionAdoptParams/g;
s/\bAdoptReport\b/PartitionAdoptReport/g;
s/\bPartitionReport\b/PartitionMaintainReport/g;
s/\bForgetResult\b/ForgetCounts/g;
s/\bListDeadLetters\b/DeadLetterList/g;
s/\bGetDeadLetter\b/DeadLetterGet/g;
s/\bDeleteDeadLetter\b/DeadLetterDelete/g;
s/\bReplayDeadLetters\b/DeadLetterReplay/g;
s/\bListEffects\b/EffectList/g;
s/\bResolveEffect\b/EffectResolve/g;
s/\bMaintainPartitions\b/PartitionMaintain/g;
s/\bAdoptPlainInbox\b/PartitionAdopt/g;
s/\bProbePooling\b/PoolingProbe/g;
s/\bDeadLettersMarked\b/DeadLetterListMarked/g;
# inboxdriver.Admin's listing, not the Tables field DeadLetters.
s/\bDeadLetters\(ctx\b/DeadLetterList(ctx/g;
s|^(\s*// )DeadLetters lists dead letters|$1DeadLetterList lists dead letters|;
# inboxadmin.Store's mark, as Admin.DeadLetterReplay that it calls.
s/\bMarkReplay\b/DeadLetterReplay/g;
PERL
)
script=${script//\$\{Q\}/$Q}

mapfile -d '' files < <(git ls-files -z --cached --others --exclude-standard -- '*.go' '*.md' |
	grep -zv -e '^CHANGELOG\.md$' -e '^RENAMES-api\.md$' -e '/CHANGELOG\.md$')

changed=()
for f in "${files[@]}"; do
	[ -f "$f" ] || continue
	before=$(cksum <"$f")
	perl -pi -e "$script" "$f"
	if [ "$(cksum <"$f")" != "$before" ]; then
		changed+=("$f")
	fi
done

# 3. Client.Admin: a Client no longer embeds *Admin, so the operator's
#    calls that the tree's tests, test kits and bench make on a client go
#    through client.Admin(). The receivers are those that name a client in
#    each place (a variable c is an *inbox.Admin in the CLI's own code, so
#    there only its tests are rewritten). Code merged in later that calls
#    an operator method on a client under another name fails to build:
#    insert .Admin() there by hand.
admin_methods='PartitionAdopt|DeadLetterDelete|Forget|ForgetCount|DeadLetterGet|DeadLetterList|EffectList|PartitionMaintain|OutboxStats|Partitions|Purge|DeadLetterReplay|EffectResolve|RunCleaner|Stats'
admin_calls() { # admin_calls PATHSPEC RECEIVER-REGEX...
	local spec=$1
	shift
	local recv
	recv=$(IFS='|'; echo "$*")
	local f
	while IFS= read -r -d '' f; do
		[ -f "$f" ] || continue
		before=$(cksum <"$f")
		perl -pi -e "s/(?<![\\w.])((?:$recv))\\.($admin_methods)\\(/\$1.Admin().\$2(/g" "$f"
		if [ "$(cksum <"$f")" != "$before" ]; then
			changed+=("$f")
		fi
	done < <(git ls-files -z --cached --others --exclude-standard -- "$spec")
}
admin_calls 'cmd/inbox/inboxcli/*_test.go' 'c'
admin_calls 'cmd/inboxlab/internal/bench/*.go' 'c' 'cleaner' 'partClean'
admin_calls 'inboxadmin/*_test.go' 'c'
admin_calls 'inboxkafka/*_test.go' 'e\.client'
admin_calls 'inboxpgx/*_test.go' 'c' 'client' 'consumer' 'e\.client' 'f\.partC' 'op' 'newClient\(t, \w+, &inbox\.Config\{PurgeRest: -1\}\)'
admin_calls 'inboxprom/*_test.go' 'cleaner'
admin_calls 'inboxrabbit/*_test.go' 'h\.client'
admin_calls 'inboxsql/internal/enginetest/*_test.go' 'c' 'cl' 'partC' 'sc'
admin_calls 'inboxsqs/*_test.go' 'h\.client'
admin_calls 'inboxtest/*.go' 'c' 'x\.client\(nil\)'
admin_calls 'inboxtransport/transporttest/*.go' 'e\.client'
admin_calls 'inboxwatermill/*_test.go' 's\.client'

# 4. Outbox.Stats is gone: inboxtest's outbox cases read the counts with
#    Admin.OutboxStats over the suite's store, and requireOutbox no longer
#    takes the outbox.
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue
	before=$(cksum <"$f")
	perl -pi -e 's/\bfunc \(x \*suite\[TTx\]\) requireOutbox\(o \*outbox\.Outbox\[TTx\], /func (x *suite[TTx]) requireOutbox(/;
		s/\bx\.requireOutbox\(o, /x.requireOutbox(/g;
		s/(?<![\w.])o\.Stats\((ctx|context\.Background\(\))\)/x.client(nil).Admin().OutboxStats($1)/g' "$f"
	if [ "$(cksum <"$f")" != "$before" ]; then
		changed+=("$f")
	fi
done < <(git ls-files -z --cached --others --exclude-standard -- 'inboxtest/*.go')

# A moved type changes the package a file imports: fix the imports of the
# Go files that changed, and of no other.
gochanged=()
for f in "${changed[@]}"; do
	case $f in *.go) gochanged+=("$f") ;; esac
done
if [ ${#gochanged[@]} -gt 0 ]; then
	"$GOIMPORTS" -w "${gochanged[@]}"
	# goimports puts an inboxtype import that it moved out of the
	# standard library's group, or added, in a group of its own: join it
	# to the project's group.
	python3 - "${gochanged[@]}" <<'PY'
import sys,re
for p in sys.argv[1:]:
    s=open(p).read()
    m=re.search(r'^import \((.*?)^\)', s, re.S|re.M)
    if not m: continue
    block=m.group(1)
    groups=[g for g in block.split('\n\n')]
    lone=[i for i,g in enumerate(groups) if g.strip()=='"github.com/txinbox/inbox/inboxtype"']
    if not lone: continue
    i=lone[0]
    # find project group: one containing "github.com/txinbox/inbox" import lines
    proj=[j for j,g in enumerate(groups) if j!=i and re.search(r'"github\.com/txinbox/inbox(/[^"]*)?"', g)]
    if not proj: continue
    j=proj[-1]
    lines=[l for l in groups[j].split('\n') if l.strip()]
    lines.append('\t"github.com/txinbox/inbox/inboxtype"')
    def key(l): return re.search(r'"([^"]*)"',l).group(1)
    lines.sort(key=key)
    lead='\n' if groups[j].startswith('\n') else ''
    trail='\n' if groups[j].endswith('\n') else ''
    groups[j]=lead+'\n'.join(lines)+trail
    del groups[i]
    nb='\n\n'.join(groups)
    if not nb.startswith('\n'): nb='\n'+nb
    if not nb.endswith('\n'): nb=nb+'\n'
    s=s[:m.start(1)]+nb+s[m.end(1):]
    open(p,'w').write(s)
PY
fi
printf '.renames.sh: %d files changed\n' "${#changed[@]}"
