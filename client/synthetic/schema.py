"""The NanoAOD schema the generator writes: branch recipes of every collection beside the
muons, and the event-level branches (names and types as in CMS NanoAODv6)."""
from __future__ import annotations

# Branch recipes, one field per "|": name dtype recipe args [mantissa bits kept, floats only].
# dtypes: f = float32, i = int32, u = uint8, b = bool (NanoAODv6's types, as in
# nano_dimuon.root). Recipes: uni LO HI | exp OFFSET SCALE | tri CENTRE HALFWIDTH (triangular)
# | pow K SCALE (SCALE*u**K) | int LO HI (LO..HI-1) | bool P | choice V1/V2/.. P1/P2/.. | const V.
MUON = """dxy f tri 0 .01 10 | dz f tri 0 .02 10 | sip3d f exp 0 1.5 10 | jetIdx i int -1 6
pfRelIso03_all f exp 0 .12 8 | pfRelIso04_all f exp 0 .15 8 | miniPFRelIso_all f exp 0 .1 8
tkRelIso f exp 0 .05 8 | nStations i int 1 5 | nTrackerLayers i int 6 18 | tightId b bool .8
mediumId b bool .85 | looseId b bool .95 | isGlobal b bool .9 | isPFcand b bool .95 | pfIsoId u int 0 7"""
ELECTRON = """dxy f tri 0 .01 10 | dz f tri 0 .02 10 | sip3d f exp 0 1.5 10 | pfRelIso03_all f exp 0 .12 8
deltaEtaSC f tri 0 .02 10 | hoe f exp 0 .03 8 | r9 f uni .5 1 10 | sieie f exp .005 .005 10
mvaFall17V2Iso f uni -1 1 10 | cutBased i int 0 5 | jetIdx i int -1 6 | convVeto b bool .9
mvaFall17V2Iso_WP90 b bool .7 | lostHits u int 0 3"""
PHOTON = """r9 f uni .3 1 10 | sieie f exp .005 .006 10 | hoe f exp 0 .05 8 | mvaID f uni -1 1 10
pfRelIso03_all f exp 0 .3 8 | charge i const 0 | pdgId i const 22 | cutBasedBitmap i int 0 8
jetIdx i int -1 8 | electronVeto b bool .8 | pixelSeed b bool .2 | mvaID_WP90 b bool .5"""
JET = """area f uni .35 .65 10 | btagDeepFlavB f pow 4 1 10 | btagDeepB f pow 4 1 10
btagCSVV2 f pow 2 1 10 | qgl f uni 0 1 10 | chHEF f uni 0 1 6 | neHEF f pow 2 1 6 | chEmEF f pow 3 1 6
neEmEF f pow 2 1 6 | muEF f pow 8 1 6 | rawFactor f uni 0 .3 6 | bRegCorr f tri 1.05 .2 10
jetId i choice 0/2/6 .05/.05/.9 | puId i choice 0/4/6/7 .2/.1/.1/.6 | nConstituents i int 2 60
muonIdx1 i int -1 2 | electronIdx1 i int -1 1 | cleanmask u int 0 2"""
TAU = """decayMode i choice 0/1/10/11 .3/.45/.2/.05 | dxy f tri 0 .02 10 | dz f tri 0 .05 14
chargedIso f exp 0 3 10 | rawDeepTau2017v2p1VSjet f uni 0 1 10 | jetIdx i int -1 6
idDeepTau2017v2p1VSjet u int 0 256 | idDeepTau2017v2p1VSe u int 0 256 | idDeepTau2017v2p1VSmu u int 0 16"""
TRIGOBJ = "id i choice 1/11/13/15/22 .4/.15/.2/.1/.15 | filterBits i int 0 1024 | l1pt f exp 0 20 8"
SV = """dlen f exp 0 .5 10 | dlenSig f exp 3 10 10 | dxy f exp 0 .3 10 | dxySig f exp 3 10 10
pAngle f exp 0 .03 10 | chi2 f exp 0 1 8 | ndof f int 1 8 8"""
FLAT = """MET_pt f exp 0 25 23 | MET_phi f uni -3.14159 3.14159 12 | MET_sumEt f exp 200 500 23
MET_significance f exp 0 3 10 | MET_covXX f exp 50 200 8 | MET_covXY f tri 0 50 8 | MET_covYY f exp 50 200 8
PV_ndof f exp 10 80 8 | PV_x f tri .096 .002 10 | PV_y f tri -.06 .002 10 | PV_z f tri 0 6 16
PV_chi2 f tri 1 .3 8 | PV_score f exp 100 3000 8 | PV_npvs i int 5 60 | PV_npvsGood i int 5 55
fixedGridRhoFastjetAll f exp 5 15 10 | fixedGridRhoFastjetCentral f exp 5 14 10
fixedGridRhoFastjetCentralCalo f exp 3 9 10 | fixedGridRhoFastjetCentralNeutral f exp 1 3 10
HLT_IsoMu27 b bool .25 | HLT_Mu50 b bool .05 | HLT_Mu17 b bool .1 | HLT_Mu8 b bool .2
HLT_Mu17_TrkIsoVVL b bool .2 | HLT_Mu37_TkMu27 b bool .02 | HLT_TripleMu_12_10_5 b bool .01
HLT_Ele32_WPTight_Gsf b bool .05 | HLT_Ele35_WPTight_Gsf b bool .04 | HLT_PFJet500 b bool .01
HLT_Ele23_Ele12_CaloIdL_TrackIdL_IsoVL b bool .02 | HLT_DoubleEle25_CaloIdL_MW b bool .01
HLT_Photon200 b bool .005 | HLT_PFHT1050 b bool .01 | HLT_PFMET120_PFMHT120_IDTight b bool .01
HLT_DoubleMu4_3_Jpsi b bool .01 | HLT_Dimuon25_Jpsi b bool .01 | Flag_goodVertices b bool .999
Flag_globalSuperTightHalo2016Filter b bool .999 | Flag_HBHENoiseFilter b bool .999
Flag_EcalDeadCellTriggerPrimitiveFilter b bool .999 | Flag_BadPFMuonFilter b bool .999
Flag_eeBadScFilter b bool .999 | Flag_METFilters b bool .995"""
# (collection, mean multiplicity, pt threshold, pt slope, |eta| limit, mass recipe,
#  charge: None = no charge branch, 0 = charge only, pdg = charge and pdgId, extra fields)
COLLECTIONS = [
    ("Electron", 0.6, 5.0, 15.0, 2.5, "const 0.000511", 11, ELECTRON),
    ("Photon", 0.8, 5.0, 12.0, 2.5, "const 0", None, PHOTON),
    ("Jet", 4.5, 15.0, 25.0, 4.7, "jet", None, JET),
    ("Tau", 0.5, 18.0, 15.0, 2.3, "uni 0.14 1.8", 0, TAU),
    ("TrigObj", 2.5, 3.0, 20.0, 2.5, None, None, TRIGOBJ),
    ("SV", 0.7, 1.0, 8.0, 2.4, "exp 0.3 1.5", None, SV),
]
DTYPES = {"f": "f4", "i": "i4", "u": "u1", "b": "?"}
