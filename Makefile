# The two commands of the README:
#   make demo   install everything, profile the bundled slow-DataLoader example on 2 gloo ranks,
#               print the verdict, serve the app on it (http://127.0.0.1:8501)
#   make test   install everything (Debian's chromium for the browser test too), run every test
PY ?= python3
PORT ?= 8501
DEMO_RUN ?= traces/demo-slow-data
STREAMLIT_FLAGS = --server.headless true --server.address 127.0.0.1 --server.port $(PORT) \
                  --browser.gatherUsageStats false --server.fileWatcherType none

.PHONY: install demo test browser serve

install:
	@# On a CPU machine take the pinned CPU wheel; where torch is importable (GPU boxes) keep it.
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"

browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q chromium; }

demo: install
	rm -rf $(DEMO_RUN)
	$(PY) -m workbench profile --nproc-per-node 2 --out $(DEMO_RUN) \
	    workbench/examples/slow_data_ddp.py --num-workers 0
	$(MAKE) serve

serve:
	$(PY) -m streamlit run app.py $(STREAMLIT_FLAGS) -- --traces traces

# Tests run in TEST_WORKERS processes (pytest-xdist; auto = one per core), a test file per process
# at a time, so a module's fixtures are made once; TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= auto

test: install browser
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25
