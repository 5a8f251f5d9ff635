# mk/install.mk - `make install` and `make uninstall`: the binaries, the systemd unit, the
# sysusers.d file, the example environment file, the man pages dtrain(1) and dtraind(8), the
# bash completion of both commands and, when the build made it (nvcc found), the CUDA backend
# libdtrain-cuda.so in $(PREFIX)/lib/dtrain, where lib/nn/gpu.c looks for it from
# $(PREFIX)/bin; each line printed as it goes.
#
#   make install [PREFIX=/usr/local] [DESTDIR=/tmp/pkg]   build (`all`), then install
#   make install-files ...                                install $(BIN)'s binaries as they are, no build
#   make uninstall [PREFIX=...] [DESTDIR=...]             remove what install put there
#
# install-files is what the tests call (with BIN=$DT_BIN_DIR): they install the very binaries they
# test, and never relink them while other tests run. The unit's ExecStart is rewritten to
# $(PREFIX)/bin; /etc stays /etc whatever PREFIX is. The man pages go to $(PREFIX)/share/man/man1
# and man8, the completion to $(PREFIX)/share/bash-completion/completions/dtrain (and dtraind, a
# link to it): where man-db and bash-completion look, for PREFIX /usr/local as for /usr. Nothing
# under /etc/dtrain but the example is touched: an existing dtraind.env, token or TF_CONFIG is
# never overwritten or removed, nor is the state in /var/lib/dtrain. Neither target runs
# systemd-sysusers or systemctl: install prints them.

PREFIX        ?= /usr/local
DESTDIR       ?=
INSTALL_BIN   := $(DESTDIR)$(PREFIX)/bin
INSTALL_UNIT  := $(DESTDIR)$(PREFIX)/lib/systemd/system/dtraind.service
INSTALL_USERS := $(DESTDIR)$(PREFIX)/lib/sysusers.d/dtrain.conf
INSTALL_ENV   := $(DESTDIR)/etc/dtrain/dtraind.env.example
INSTALL_MAN1  := $(DESTDIR)$(PREFIX)/share/man/man1/dtrain.1
INSTALL_MAN8  := $(DESTDIR)$(PREFIX)/share/man/man8/dtraind.8
INSTALL_COMP  := $(DESTDIR)$(PREFIX)/share/bash-completion/completions/dtrain
INSTALL_COMPD := $(DESTDIR)$(PREFIX)/share/bash-completion/completions/dtraind
INSTALL_CUDA  := $(DESTDIR)$(PREFIX)/lib/dtrain/libdtrain-cuda.so

# mkdir_if DIR: create DIR 0755 when missing; an existing one keeps its mode (/etc/dtrain 0750).
mkdir_if = [ -d $(1) ] || install -d -m 755 $(1)

.PHONY: install install-files uninstall

install: all
	@$(MAKE) --no-print-directory install-files

install-files:
	@for f in $(BIN)/dtraind $(BIN)/dtrain; do \
	  test -x $$f || { echo "install: $$f is missing: run 'make' first"; exit 2; }; done
	@$(call mkdir_if,$(INSTALL_BIN))
	@for f in dtraind dtrain; do \
	  install -m 755 $(BIN)/$$f $(INSTALL_BIN)/$$f && echo "  INSTALL $(INSTALL_BIN)/$$f"; done
	@$(call mkdir_if,$(dir $(INSTALL_UNIT))) && $(call mkdir_if,$(dir $(INSTALL_USERS)))
	@sed 's|^ExecStart=/usr/local/bin/dtraind |ExecStart=$(PREFIX)/bin/dtraind |' \
	  config/systemd/dtraind.service >$(INSTALL_UNIT).tmp
	@grep -q '^ExecStart=$(PREFIX)/bin/dtraind ' $(INSTALL_UNIT).tmp || \
	  { rm -f $(INSTALL_UNIT).tmp; echo "install: ExecStart of dtraind.service not rewritten"; exit 2; }
	@chmod 644 $(INSTALL_UNIT).tmp && mv $(INSTALL_UNIT).tmp $(INSTALL_UNIT)
	@echo "  INSTALL $(INSTALL_UNIT)  (ExecStart=$(PREFIX)/bin/dtraind)"
	@install -m 644 config/systemd/dtrain.sysusers.conf $(INSTALL_USERS)
	@echo "  INSTALL $(INSTALL_USERS)"
	@$(call mkdir_if,$(dir $(INSTALL_ENV)))
	@install -m 644 config/systemd/dtraind.env.example $(INSTALL_ENV)
	@echo "  INSTALL $(INSTALL_ENV)"
	@$(call mkdir_if,$(dir $(INSTALL_MAN1))) && $(call mkdir_if,$(dir $(INSTALL_MAN8)))
	@install -m 644 docs/man/dtrain.1 $(INSTALL_MAN1) && echo "  INSTALL $(INSTALL_MAN1)"
	@install -m 644 docs/man/dtraind.8 $(INSTALL_MAN8) && echo "  INSTALL $(INSTALL_MAN8)"
	@$(call mkdir_if,$(dir $(INSTALL_COMP)))
	@install -m 644 config/completion/dtrain.bash $(INSTALL_COMP) && echo "  INSTALL $(INSTALL_COMP)"
	@ln -sfn dtrain $(INSTALL_COMPD) && echo "  INSTALL $(INSTALL_COMPD) -> dtrain"
	@# the CUDA backend only where this build made one; a stale one from an earlier install
	@# would be another build's (its ABI check refuses it), so it goes
	@if [ -f $(BIN)/libdtrain-cuda.so ]; then $(call mkdir_if,$(dir $(INSTALL_CUDA))) && \
	  install -m 644 $(BIN)/libdtrain-cuda.so $(INSTALL_CUDA) && echo "  INSTALL $(INSTALL_CUDA)"; \
	 elif [ -e $(INSTALL_CUDA) ]; then rm -f $(INSTALL_CUDA) && echo "  REMOVE  $(INSTALL_CUDA) (this build has no CUDA backend)"; fi
	@echo "next, as root: systemd-sysusers; /etc/dtrain/tf_config.json and token (root:dtrain 0640);"
	@echo "  data in /srv/dtrain; systemctl daemon-reload; systemctl enable --now dtraind (see README)"
	@echo "then: man dtrain, man 8 dtraind; completion in new bash shells (package bash-completion)"

uninstall:
	@for f in $(INSTALL_BIN)/dtraind $(INSTALL_BIN)/dtrain $(INSTALL_UNIT) $(INSTALL_USERS) \
	    $(INSTALL_ENV) $(INSTALL_MAN1) $(INSTALL_MAN8) $(INSTALL_COMP) $(INSTALL_COMPD) $(INSTALL_CUDA); do \
	  if [ -e $$f ] || [ -L $$f ]; then rm -f $$f && echo "  REMOVE  $$f"; fi; done
	@rmdir $(dir $(INSTALL_ENV)) 2>/dev/null && echo "  REMOVE  $(dir $(INSTALL_ENV))" || true
	@rmdir $(dir $(INSTALL_CUDA)) 2>/dev/null && echo "  REMOVE  $(dir $(INSTALL_CUDA))" || true
	@echo "kept: /etc/dtrain's configuration and /var/lib/dtrain; the dtrain user (systemd-sysusers made it)"
