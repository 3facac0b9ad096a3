"""Every branch of the real 2015 CMS Open Data NanoAOD sample (the AGC input format),
by collection and type, for ``bench make-data --agc`` (:mod:`bench.agcgen`).

Written from ``nanoAOD_2015_CMS_Open_Data_ttbar.root`` (947 branches); tests/unit/bench/test_agcgen.py
checks the generated files against that file. Types: f float32, i int32, u uint8, b bool,
I uint32, L uint64. A collection ``Jet`` with fields ``pt`` is written as ``nJet`` (uint32)
and ``Jet_pt``; a field ``-`` is the collection itself (``LHEPdfWeight``, a float array)."""
from __future__ import annotations

#: collection -> {type code: [field, ...]}
COLLECTIONS: dict[str, dict[str, list[str]]] = {
    "CorrT1METJet": {
        "f": """area eta muonSubtrFactor phi rawPt""".split(),
    },
    "Electron": {
        "f": """deltaEtaSC dr03EcalRecHitSumEt dr03HcalDepth1TowerSumEt dr03TkSumPt dr03TkSumPtHEEP dxy
dxyErr dz dzErr eInvMinusPInv energyErr eta hoe ip3d jetPtRelv2 jetRelIso mass
miniPFRelIso_all miniPFRelIso_chg mvaFall17V2Iso mvaFall17V2noIso pfRelIso03_all
pfRelIso03_chg phi pt r9 scEtOverPt sieie sip3d mvaTTH""".split(),
        "i": """charge cutBased jetIdx pdgId photonIdx tightCharge vidNestedWPBitmap
vidNestedWPBitmapHEEP genPartIdx""".split(),
        "b": """convVeto cutBased_HEEP isPFcand mvaFall17V2Iso_WP80 mvaFall17V2Iso_WP90
mvaFall17V2Iso_WPL mvaFall17V2noIso_WP80 mvaFall17V2noIso_WP90 mvaFall17V2noIso_WPL""".split(),
        "u": """jetNDauCharged lostHits seedGain genPartFlav cleanmask""".split(),
    },
    "FatJet": {
        "f": """area btagCSVV2 btagDDBvLV2 btagDDCvBV2 btagDDCvLV2 btagDeepB btagHbb deepTagMD_H4qvsQCD
deepTagMD_HbbvsQCD deepTagMD_TvsQCD deepTagMD_WvsQCD deepTagMD_ZHbbvsQCD
deepTagMD_ZHccvsQCD deepTagMD_ZbbvsQCD deepTagMD_ZvsQCD deepTagMD_bbvsLight
deepTagMD_ccvsLight deepTag_H deepTag_QCD deepTag_QCDothers deepTag_TvsQCD
deepTag_WvsQCD deepTag_ZvsQCD eta mass particleNetMD_QCD particleNetMD_Xbb
particleNetMD_Xcc particleNetMD_Xqq particleNet_H4qvsQCD particleNet_HbbvsQCD
particleNet_HccvsQCD particleNet_QCD particleNet_TvsQCD particleNet_WvsQCD
particleNet_ZvsQCD particleNet_mass phi pt rawFactor tau1 tau2 tau3 lsf3""".split(),
        "i": """jetId electronIdx3SJ muonIdx3SJ genJetAK8Idx hadronFlavour""".split(),
        "u": """nConstituents nBHadrons nCHadrons""".split(),
    },
    "FsrPhoton": {
        "f": """dROverEt2 eta phi pt relIso03""".split(),
        "i": """muonIdx""".split(),
    },
    "GenJetAK8": {
        "f": """eta mass phi pt""".split(),
        "i": """partonFlavour""".split(),
        "u": """hadronFlavour""".split(),
    },
    "GenJet": {
        "f": """eta mass phi pt""".split(),
        "i": """partonFlavour""".split(),
        "u": """hadronFlavour""".split(),
    },
    "GenPart": {
        "f": """eta mass phi pt""".split(),
        "i": """genPartIdxMother pdgId status statusFlags""".split(),
    },
    "GenVisTau": {
        "f": """eta mass phi pt""".split(),
        "i": """charge genPartIdxMother status""".split(),
    },
    "LHEPdfWeight": {
        "f": """-""".split(),
    },
    "LHEReweightingWeight": {
        "f": """-""".split(),
    },
    "LHEScaleWeight": {
        "f": """-""".split(),
    },
    "PSWeight": {
        "f": """-""".split(),
    },
    "Jet": {
        "f": """area btagCSVV2 btagDeepB btagDeepCvB btagDeepCvL btagDeepFlavB btagDeepFlavCvB
btagDeepFlavCvL btagDeepFlavQG chEmEF chFPV0EF chHEF eta mass muEF muonSubtrFactor
neEmEF neHEF phi pt puIdDisc qgl rawFactor bRegCorr bRegRes cRegCorr cRegRes""".split(),
        "i": """electronIdx1 electronIdx2 jetId muonIdx1 muonIdx2 nElectrons nMuons puId genJetIdx
hadronFlavour partonFlavour""".split(),
        "u": """nConstituents cleanmask""".split(),
    },
    "LHEPart": {
        "f": """pt eta phi mass incomingpz""".split(),
        "i": """pdgId status spin""".split(),
    },
    "Muon": {
        "f": """dxy dxyErr dxybs dz dzErr eta ip3d jetPtRelv2 jetRelIso mass miniPFRelIso_all
miniPFRelIso_chg pfRelIso03_all pfRelIso03_chg pfRelIso04_all phi pt ptErr segmentComp
sip3d softMva tkRelIso tunepRelPt mvaLowPt mvaTTH""".split(),
        "i": """charge jetIdx nStations nTrackerLayers pdgId tightCharge fsrPhotonIdx genPartIdx""".split(),
        "u": """highPtId jetNDauCharged miniIsoId multiIsoId mvaId mvaLowPtId pfIsoId puppiIsoId tkIsoId
genPartFlav cleanmask""".split(),
        "b": """highPurity inTimeMuon isGlobal isPFcand isStandalone isTracker looseId mediumId
mediumPromptId softId softMvaId tightId triggerIdLoose""".split(),
    },
    "Photon": {
        "f": """energyErr eta hoe mass mvaID mvaID_Fall17V1p1 pfRelIso03_all pfRelIso03_chg phi pt r9
sieie""".split(),
        "i": """charge cutBased cutBased_Fall17V1Bitmap electronIdx jetIdx pdgId vidNestedWPBitmap
genPartIdx""".split(),
        "b": """electronVeto isScEtaEB isScEtaEE mvaID_WP80 mvaID_WP90 pixelSeed""".split(),
        "u": """seedGain genPartFlav cleanmask""".split(),
    },
    "GenDressedLepton": {
        "f": """eta mass phi pt""".split(),
        "i": """pdgId""".split(),
        "b": """hasTauAnc""".split(),
    },
    "GenIsolatedPhoton": {
        "f": """eta mass phi pt""".split(),
    },
    "SoftActivityJet": {
        "f": """eta phi pt""".split(),
    },
    "Tau": {
        "f": """chargedIso dxy dz eta leadTkDeltaEta leadTkDeltaPhi leadTkPtOverTauPt mass neutralIso
phi photonsOutsideSignalCone pt puCorr rawIso rawIsodR03 rawMVAnewDM rawMVAoldDM
rawMVAoldDMdR03""".split(),
        "i": """charge decayMode jetIdx rawAntiEleCat genPartIdx""".split(),
        "u": """idAntiEle idAntiMu idMVAnewDM idMVAoldDM idMVAoldDMdR03 cleanmask genPartFlav""".split(),
        "b": """idAntiEleDeadECal idDecayMode idDecayModeNewDMs""".split(),
    },
    "OtherPV": {
        "f": """z""".split(),
    },
    "SV": {
        "f": """dlen dlenSig dxy dxySig pAngle chi2 eta mass ndof phi pt x y z""".split(),
        "i": """charge""".split(),
        "u": """ntracks""".split(),
    },
}
#: type code -> flat (one value per event) branches
FLAT: dict[str, list[str]] = {
    "I": """run luminosityBlock""".split(),
    "L": """event""".split(),
    "f": """HTXS_Higgs_pt HTXS_Higgs_y btagWeight_CSVV2 btagWeight_DeepCSVB CaloMET_phi CaloMET_pt
CaloMET_sumEt ChsMET_phi ChsMET_pt ChsMET_sumEt DeepMETResolutionTune_phi
DeepMETResolutionTune_pt DeepMETResponseTune_phi DeepMETResponseTune_pt Generator_binvar
Generator_scalePDF Generator_weight Generator_x1 Generator_x2 Generator_xpdf1
Generator_xpdf2 genWeight LHEWeight_originalXWGTUP LHE_HT LHE_HTIncoming LHE_Vpt LHE_AlphaS
GenMET_phi GenMET_pt MET_MetUnclustEnUpDeltaX MET_MetUnclustEnUpDeltaY MET_covXX MET_covXY
MET_covYY MET_phi MET_pt MET_significance MET_sumEt MET_sumPtUnclustered Pileup_nTrueInt
Pileup_pudensity Pileup_gpudensity PuppiMET_phi PuppiMET_phiJERDown PuppiMET_phiJERUp
PuppiMET_phiJESDown PuppiMET_phiJESUp PuppiMET_phiUnclusteredDown PuppiMET_phiUnclusteredUp
PuppiMET_pt PuppiMET_ptJERDown PuppiMET_ptJERUp PuppiMET_ptJESDown PuppiMET_ptJESUp
PuppiMET_ptUnclusteredDown PuppiMET_ptUnclusteredUp PuppiMET_sumEt RawMET_phi RawMET_pt
RawMET_sumEt RawPuppiMET_phi RawPuppiMET_pt RawPuppiMET_sumEt fixedGridRhoFastjetAll
fixedGridRhoFastjetCentral fixedGridRhoFastjetCentralCalo
fixedGridRhoFastjetCentralChargedPileUp fixedGridRhoFastjetCentralNeutral SoftActivityJetHT
SoftActivityJetHT10 SoftActivityJetHT2 SoftActivityJetHT5 TkMET_phi TkMET_pt TkMET_sumEt
PV_ndof PV_x PV_y PV_z PV_chi2 PV_score MET_fiducialGenPhi MET_fiducialGenPt""".split(),
    "i": """HTXS_stage1_1_cat_pTjet25GeV HTXS_stage1_1_cat_pTjet30GeV HTXS_stage1_1_fine_cat_pTjet25GeV
HTXS_stage1_1_fine_cat_pTjet30GeV HTXS_stage1_2_cat_pTjet25GeV HTXS_stage1_2_cat_pTjet30GeV
HTXS_stage1_2_fine_cat_pTjet25GeV HTXS_stage1_2_fine_cat_pTjet30GeV HTXS_stage_0
HTXS_stage_1_pTjet25 HTXS_stage_1_pTjet30 Generator_id1 Generator_id2 Pileup_nPU
Pileup_sumEOOT Pileup_sumLOOT SoftActivityJetNjets10 SoftActivityJetNjets2
SoftActivityJetNjets5 genTtbarId PV_npvs PV_npvsGood""".split(),
    "u": """HTXS_njets25 HTXS_njets30 LHE_Njets LHE_Nb LHE_Nc LHE_Nuds LHE_Nglu LHE_NpNLO LHE_NpLO""".split(),
    "b": """Flag_HBHENoiseFilter Flag_HBHENoiseIsoFilter Flag_CSCTightHaloFilter
Flag_CSCTightHaloTrkMuUnvetoFilter Flag_CSCTightHalo2015Filter Flag_HcalStripHaloFilter
Flag_hcalLaserEventFilter Flag_EcalDeadCellTriggerPrimitiveFilter
Flag_EcalDeadCellBoundaryEnergyFilter Flag_goodVertices Flag_eeBadScFilter
Flag_ecalLaserCorrFilter Flag_trkPOGFilters Flag_chargedHadronTrackResolutionFilter
Flag_muonBadTrackFilter Flag_trkPOG_manystripclus53X Flag_trkPOG_toomanystripclus53X
Flag_trkPOG_logErrorTooManyClusters Flag_METFilters L1Reco_step L1simulation_step
HLTriggerFirstPath HLT_AK8PFJet360_TrimMass30 HLT_AK8PFHT700_TrimR0p1PT0p03Mass50
HLT_AK8PFHT650_TrimR0p1PT0p03Mass50 HLT_AK8PFHT600_TrimR0p1PT0p03Mass50_BTagCSV0p45
HLT_CaloJet500_NoJetID HLT_Dimuon13_PsiPrime HLT_Dimuon13_Upsilon HLT_Dimuon20_Jpsi
HLT_DoubleEle24_22_eta2p1_WPLoose_Gsf HLT_DoubleEle33_CaloIdL_GsfTrkIdVL_MW
HLT_DoubleEle33_CaloIdL_GsfTrkIdVL HLT_DoubleMediumIsoPFTau35_Trk1_eta2p1_Reg
HLT_DoubleMediumIsoPFTau40_Trk1_eta2p1_Reg HLT_DoubleMu33NoFiltersNoVtx
HLT_DoubleMu38NoFiltersNoVtx HLT_DoubleMu23NoFiltersNoVtxDisplaced
HLT_DoubleMu28NoFiltersNoVtxDisplaced HLT_DoubleMu4_3_Bs HLT_DoubleMu4_3_Jpsi_Displaced
HLT_DoubleMu4_JpsiTrk_Displaced HLT_DoubleMu4_LowMassNonResonantTrk_Displaced
HLT_DoubleMu4_PsiPrimeTrk_Displaced HLT_Mu7p5_L2Mu2_Jpsi HLT_Mu7p5_L2Mu2_Upsilon
HLT_Mu7p5_Track2_Jpsi HLT_Mu7p5_Track3p5_Jpsi HLT_Mu7p5_Track7_Jpsi HLT_Mu7p5_Track2_Upsilon
HLT_Mu7p5_Track3p5_Upsilon HLT_Mu7p5_Track7_Upsilon HLT_Dimuon0er16_Jpsi_NoOS_NoVertexing
HLT_Dimuon0er16_Jpsi_NoVertexing HLT_Dimuon6_Jpsi_NoVertexing HLT_DoublePhoton60
HLT_DoublePhoton85 HLT_Ele22_eta2p1_WPLoose_Gsf HLT_Ele22_eta2p1_WPTight_Gsf
HLT_Ele22_eta2p1_WPLoose_Gsf_LooseIsoPFTau20
HLT_Ele22_eta2p1_WPLoose_Gsf_LooseIsoPFTau20_SingleL1 HLT_Ele30WP60_SC4_Mass55
HLT_Ele30WP60_Ele8_Mass55 HLT_Ele23_WPLoose_Gsf
HLT_Ele23_WPLoose_Gsf_TriCentralPFJet50_40_30 HLT_Ele23_WPLoose_Gsf_CentralPFJet30_BTagCSV07
HLT_Ele23_WPLoose_Gsf_WHbbBoost HLT_Ele27_WPLoose_Gsf
HLT_Ele27_eta2p1_WPLoose_Gsf_LooseIsoPFTau20
HLT_Ele27_eta2p1_WPLoose_Gsf_DoubleMediumIsoPFTau35_Trk1_eta2p1_Reg
HLT_Ele27_eta2p1_WPLoose_Gsf_DoubleMediumIsoPFTau40_Trk1_eta2p1_Reg
HLT_Ele27_WPLoose_Gsf_CentralPFJet30_BTagCSV07 HLT_Ele27_WPLoose_Gsf_TriCentralPFJet50_40_30
HLT_Ele27_WPLoose_Gsf_WHbbBoost HLT_Ele27_eta2p1_WPLoose_Gsf HLT_Ele27_eta2p1_WPTight_Gsf
HLT_Ele32_eta2p1_WPTight_Gsf HLT_Ele35_CaloIdVT_GsfTrkIdT_PFJet150_PFJet50
HLT_Ele45_CaloIdVT_GsfTrkIdT_PFJet200_PFJet50 HLT_Ele105_CaloIdVT_GsfTrkIdT HLT_HT200
HLT_HT275 HLT_HT325 HLT_HT425 HLT_HT575 HLT_HT450to470 HLT_HT470to500 HLT_HT500to550
HLT_HT550to650 HLT_HT650 HLT_Mu16_eta2p1_MET30 HLT_IsoMu16_eta2p1_MET30
HLT_IsoMu16_eta2p1_MET30_LooseIsoPFTau50_Trk30_eta2p1 HLT_IsoMu17_eta2p1
HLT_IsoMu17_eta2p1_LooseIsoPFTau20 HLT_IsoMu17_eta2p1_LooseIsoPFTau20_SingleL1
HLT_IsoMu17_eta2p1_MediumIsoPFTau35_Trk1_eta2p1_Reg
HLT_IsoMu17_eta2p1_MediumIsoPFTau40_Trk1_eta2p1_Reg HLT_DoubleIsoMu17_eta2p1 HLT_IsoMu18
HLT_OldIsoMu18 HLT_IsoMu18_CentralPFJet30_BTagCSV07 HLT_IsoMu18_TriCentralPFJet50_40_30
HLT_IsoMu20 HLT_IsoMu20_eta2p1_LooseIsoPFTau20 HLT_IsoMu22
HLT_IsoMu22_CentralPFJet30_BTagCSV07 HLT_IsoMu22_TriCentralPFJet50_40_30 HLT_IsoMu27
HLT_IsoTkMu18 HLT_OldIsoTkMu18 HLT_IsoTkMu20 HLT_IsoTkMu22 HLT_IsoTkMu27
HLT_JetE30_NoBPTX3BX_NoHalo HLT_JetE30_NoBPTX HLT_JetE50_NoBPTX3BX_NoHalo
HLT_JetE70_NoBPTX3BX_NoHalo HLT_L1SingleMu16 HLT_L2Mu10 HLT_L1SingleMuOpen
HLT_L1SingleMuOpen_DT HLT_L1Tech_DT_GlobalOR HLT_L2DoubleMu23_NoVertex
HLT_L2DoubleMu28_NoVertex_2Cha_Angle2p5_Mass10
HLT_L2DoubleMu38_NoVertex_2Cha_Angle2p5_Mass10 HLT_L2Mu10_NoVertex_NoBPTX3BX_NoHalo
HLT_L2Mu10_NoVertex_NoBPTX HLT_L2Mu35_NoVertex_3Sta_NoBPTX3BX_NoHalo
HLT_L2Mu40_NoVertex_3Sta_NoBPTX3BX_NoHalo HLT_LooseIsoPFTau50_Trk30_eta2p1
HLT_LooseIsoPFTau50_Trk30_eta2p1_MET120 HLT_LooseIsoPFTau50_Trk30_eta2p1_MET80 HLT_Mu17_Mu8
HLT_Mu17_Mu8_DZ HLT_Mu17_Mu8_SameSign_DZ HLT_Mu20_Mu10 HLT_Mu20_Mu10_DZ
HLT_Mu20_Mu10_SameSign_DZ HLT_Mu17_TkMu8_DZ HLT_Mu17_TrkIsoVVL_Mu8_TrkIsoVVL
HLT_Mu17_TrkIsoVVL_Mu8_TrkIsoVVL_DZ HLT_Mu17_TrkIsoVVL_TkMu8_TrkIsoVVL
HLT_Mu17_TrkIsoVVL_TkMu8_TrkIsoVVL_DZ HLT_Mu25_TkMu0_dEta18_Onia HLT_Mu27_TkMu8
HLT_Mu30_TkMu11 HLT_Mu30_eta2p1_PFJet150_PFJet50 HLT_Mu40_TkMu11
HLT_Mu40_eta2p1_PFJet200_PFJet50 HLT_Mu20 HLT_TkMu20 HLT_Mu24_eta2p1 HLT_TkMu24_eta2p1
HLT_Mu27 HLT_TkMu27 HLT_Mu50 HLT_Mu45_eta2p1 HLT_Mu38NoFiltersNoVtx_Photon38_CaloIdL
HLT_Mu42NoFiltersNoVtx_Photon42_CaloIdL HLT_Mu28NoFiltersNoVtxDisplaced_Photon28_CaloIdL
HLT_Mu33NoFiltersNoVtxDisplaced_Photon33_CaloIdL HLT_Mu23NoFiltersNoVtx_Photon23_CaloIdL
HLT_DoubleMu18NoFiltersNoVtx HLT_Mu33NoFiltersNoVtxDisplaced_DisplacedJet50_Tight
HLT_Mu33NoFiltersNoVtxDisplaced_DisplacedJet50_Loose
HLT_Mu28NoFiltersNoVtx_DisplacedJet40_Loose
HLT_Mu38NoFiltersNoVtxDisplaced_DisplacedJet60_Tight
HLT_Mu38NoFiltersNoVtxDisplaced_DisplacedJet60_Loose
HLT_Mu38NoFiltersNoVtx_DisplacedJet60_Loose HLT_Mu28NoFiltersNoVtx_CentralCaloJet40
HLT_PFHT350_PFMET100 HLT_PFHT550_4JetPt50 HLT_PFHT650_4JetPt50 HLT_PFHT750_4JetPt50
HLT_PFHT600 HLT_PFHT650 HLT_PFHT800 HLT_PFJet40 HLT_PFJet60 HLT_PFJet80 HLT_PFJet140
HLT_PFJet200 HLT_PFJet260 HLT_PFJet320 HLT_PFJet400 HLT_PFJet450 HLT_PFJet500
HLT_DiPFJetAve40 HLT_DiPFJetAve60 HLT_DiPFJetAve80 HLT_DiPFJetAve140 HLT_DiPFJetAve200
HLT_DiPFJetAve260 HLT_DiPFJetAve320 HLT_DiPFJetAve400 HLT_DiPFJetAve500
HLT_DiPFJetAve60_HFJEC HLT_DiPFJetAve80_HFJEC HLT_DiPFJetAve100_HFJEC
HLT_DiPFJetAve160_HFJEC HLT_DiPFJetAve220_HFJEC HLT_DiPFJetAve300_HFJEC
HLT_DiPFJet40_DEta3p5_MJJ600_PFMETNoMu140 HLT_DiPFJet40_DEta3p5_MJJ600_PFMETNoMu80
HLT_DiCentralPFJet55_PFMET110 HLT_PFHT200 HLT_PFHT250 HLT_PFHT300 HLT_PFHT350 HLT_PFHT400
HLT_PFHT475 HLT_PFHT200_PFAlphaT0p51 HLT_PFHT200_DiPFJetAve90_PFAlphaT0p57
HLT_PFHT200_DiPFJetAve90_PFAlphaT0p63 HLT_PFHT250_DiPFJetAve90_PFAlphaT0p55
HLT_PFHT250_DiPFJetAve90_PFAlphaT0p58 HLT_PFHT300_DiPFJetAve90_PFAlphaT0p53
HLT_PFHT300_DiPFJetAve90_PFAlphaT0p54 HLT_PFHT350_DiPFJetAve90_PFAlphaT0p52
HLT_PFHT350_DiPFJetAve90_PFAlphaT0p53 HLT_PFHT400_DiPFJetAve90_PFAlphaT0p51
HLT_PFHT400_DiPFJetAve90_PFAlphaT0p52 HLT_MET60_IsoTrk35_Loose HLT_MET75_IsoTrk50
HLT_MET90_IsoTrk50 HLT_PFMET120_BTagCSV0p72 HLT_PFMET120_Mu5 HLT_PFMET170_NoiseCleaned
HLT_PFMET170_HBHECleaned HLT_PFMET170_JetIdCleaned HLT_PFMET170 HLT_PFMET90_PFMHT90_IDTight
HLT_PFMET100_PFMHT100_IDTight HLT_PFMET110_PFMHT110_IDTight HLT_PFMET120_PFMHT120_IDTight
HLT_CaloMHTNoPU90_PFMET90_PFMHT90_IDTight_BTagCSV0p72
HLT_CaloMHTNoPU90_PFMET90_PFMHT90_IDTight HLT_QuadPFJet_DoubleBTagCSV_VBF_Mqq200
HLT_QuadPFJet_SingleBTagCSV_VBF_Mqq460 HLT_QuadPFJet_DoubleBTagCSV_VBF_Mqq240
HLT_QuadPFJet_SingleBTagCSV_VBF_Mqq500 HLT_QuadPFJet_VBF HLT_L1_TripleJet_VBF
HLT_QuadJet45_TripleBTagCSV0p67 HLT_QuadJet45_DoubleBTagCSV0p67
HLT_DoubleJet90_Double30_TripleBTagCSV0p67 HLT_DoubleJet90_Double30_DoubleBTagCSV0p67
HLT_DoubleJetsC100_DoubleBTagCSV0p85_DoublePFJetsC160
HLT_DoubleJetsC100_DoubleBTagCSV0p9_DoublePFJetsC100MaxDeta1p6
HLT_DoubleJetsC112_DoubleBTagCSV0p85_DoublePFJetsC172
HLT_DoubleJetsC112_DoubleBTagCSV0p9_DoublePFJetsC112MaxDeta1p6 HLT_Photon135_PFMET100
HLT_Photon22_R9Id90_HE10_Iso40_EBOnly_PFMET40 HLT_Photon22_R9Id90_HE10_Iso40_EBOnly_VBF
HLT_Photon250_NoHE HLT_Photon300_NoHE
HLT_Photon26_R9Id85_OR_CaloId24b40e_Iso50T80L_Photon16_AND_HE10_R9Id65_Eta2_Mass60
HLT_Photon36_R9Id85_OR_CaloId24b40e_Iso50T80L_Photon22_AND_HE10_R9Id65_Eta2_Mass15
HLT_Photon36_R9Id90_HE10_Iso40_EBOnly_PFMET40 HLT_Photon36_R9Id90_HE10_Iso40_EBOnly_VBF
HLT_Photon50_R9Id90_HE10_Iso40_EBOnly_PFMET40 HLT_Photon50_R9Id90_HE10_Iso40_EBOnly_VBF
HLT_Photon75_R9Id90_HE10_Iso40_EBOnly_PFMET40 HLT_Photon75_R9Id90_HE10_Iso40_EBOnly_VBF
HLT_Photon90_R9Id90_HE10_Iso40_EBOnly_PFMET40 HLT_Photon90_R9Id90_HE10_Iso40_EBOnly_VBF
HLT_Photon120_R9Id90_HE10_Iso40_EBOnly_PFMET40 HLT_Photon120_R9Id90_HE10_Iso40_EBOnly_VBF
HLT_Mu8_TrkIsoVVL HLT_Mu17_TrkIsoVVL HLT_Ele12_CaloIdL_TrackIdL_IsoVL_PFJet30
HLT_Ele23_CaloIdL_TrackIdL_IsoVL_PFJet30 HLT_Ele33_CaloIdL_TrackIdL_IsoVL_PFJet30
HLT_BTagMu_DiJet20_Mu5 HLT_BTagMu_DiJet40_Mu5 HLT_BTagMu_DiJet70_Mu5 HLT_BTagMu_DiJet110_Mu5
HLT_BTagMu_Jet300_Mu5 HLT_Ele23_Ele12_CaloIdL_TrackIdL_IsoVL_DZ
HLT_Ele17_Ele12_CaloIdL_TrackIdL_IsoVL_DZ HLT_Ele16_Ele12_Ele8_CaloIdL_TrackIdL
HLT_Mu8_TrkIsoVVL_Ele23_CaloIdL_TrackIdL_IsoVL
HLT_Mu8_TrkIsoVVL_Ele17_CaloIdL_TrackIdL_IsoVL
HLT_Mu23_TrkIsoVVL_Ele12_CaloIdL_TrackIdL_IsoVL
HLT_Mu17_TrkIsoVVL_Ele12_CaloIdL_TrackIdL_IsoVL HLT_Mu30_Ele30_CaloIdL_GsfTrkIdVL
HLT_Mu8_DiEle12_CaloIdL_TrackIdL HLT_Mu12_Photon25_CaloIdL HLT_Mu12_Photon25_CaloIdL_L1ISO
HLT_Mu12_Photon25_CaloIdL_L1OR HLT_Mu17_Photon22_CaloIdL_L1ISO
HLT_Mu17_Photon30_CaloIdL_L1ISO HLT_Mu17_Photon35_CaloIdL_L1ISO
HLT_DiMu9_Ele9_CaloIdL_TrackIdL HLT_TripleMu_12_10_5 HLT_Mu3er_PFHT140_PFMET125
HLT_Mu6_PFHT200_PFMET80_BTagCSV0p72 HLT_Mu6_PFHT200_PFMET100 HLT_Mu14er_PFMET100
HLT_Ele23_Ele12_CaloIdL_TrackIdL_IsoVL HLT_Ele17_Ele12_CaloIdL_TrackIdL_IsoVL
HLT_Ele23_CaloIdL_TrackIdL_IsoVL HLT_Ele17_CaloIdL_TrackIdL_IsoVL
HLT_Ele12_CaloIdL_TrackIdL_IsoVL HLT_AK8DiPFJet280_200_TrimMass30_BTagCSV0p45
HLT_AK8DiPFJet250_200_TrimMass30_BTagCSV0p45 HLT_PFHT650_WideJetMJJ900DEtaJJ1p5
HLT_PFHT650_WideJetMJJ950DEtaJJ1p5 HLT_Photon22 HLT_Photon30 HLT_Photon36 HLT_Photon50
HLT_Photon75 HLT_Photon90 HLT_Photon120 HLT_Photon175 HLT_Photon165_HE10
HLT_Photon22_R9Id90_HE10_IsoM HLT_Photon30_R9Id90_HE10_IsoM HLT_Photon36_R9Id90_HE10_IsoM
HLT_Photon50_R9Id90_HE10_IsoM HLT_Photon75_R9Id90_HE10_IsoM HLT_Photon90_R9Id90_HE10_IsoM
HLT_Photon120_R9Id90_HE10_IsoM HLT_Photon165_R9Id90_HE10_IsoM
HLT_Diphoton30_18_R9Id_OR_IsoCaloId_AND_HE_R9Id_Mass95
HLT_Diphoton30_18_R9Id_OR_IsoCaloId_AND_HE_R9Id_DoublePixelSeedMatch_Mass70
HLT_Diphoton30PV_18PV_R9Id_AND_IsoCaloId_AND_HE_R9Id_DoublePixelVeto_Mass55
HLT_Diphoton30_18_Solid_R9Id_AND_IsoCaloId_AND_HE_R9Id_Mass55
HLT_Diphoton30EB_18EB_R9Id_OR_IsoCaloId_AND_HE_R9Id_DoublePixelVeto_Mass55
HLT_Dimuon0_Jpsi_Muon HLT_Dimuon0_Upsilon_Muon HLT_QuadMuon0_Dimuon0_Jpsi
HLT_QuadMuon0_Dimuon0_Upsilon HLT_Rsq0p25 HLT_Rsq0p30 HLT_RsqMR240_Rsq0p09_MR200
HLT_RsqMR240_Rsq0p09_MR200_4jet HLT_RsqMR270_Rsq0p09_MR200 HLT_RsqMR270_Rsq0p09_MR200_4jet
HLT_Rsq0p02_MR300_TriPFJet80_60_40_DoublePFBTagCSV0p7_0p4_Mbb60_200
HLT_Rsq0p02_MR300_TriPFJet80_60_40_DoublePFBTagCSV0p7_Mbb60_200
HLT_HT750_DisplacedDijet80_Inclusive HLT_HT650_DisplacedDijet80_Inclusive
HLT_HT350_DisplacedDijet80_Tight_DisplacedTrack HLT_HT250_DisplacedDijet40_DisplacedTrack
HLT_HT350_DisplacedDijet40_DisplacedTrack HLT_HT350_DisplacedDijet80_DisplacedTrack
HLT_HT400_DisplacedDijet40_Inclusive HLT_HT500_DisplacedDijet40_Inclusive
HLT_HT550_DisplacedDijet40_Inclusive HLT_VBF_DisplacedJet40_DisplacedTrack
HLT_VBF_DisplacedJet40_DisplacedTrack_2TrackIP2DSig5
HLT_VBF_DisplacedJet40_TightID_DisplacedTrack HLT_VBF_DisplacedJet40_Hadronic
HLT_VBF_DisplacedJet40_Hadronic_2PromptTrack HLT_VBF_DisplacedJet40_TightID_Hadronic
HLT_VBF_DisplacedJet40_VTightID_Hadronic HLT_VBF_DisplacedJet40_VVTightID_Hadronic
HLT_VBF_DisplacedJet40_VTightID_DisplacedTrack
HLT_VBF_DisplacedJet40_VVTightID_DisplacedTrack HLT_PFMETNoMu90_PFMHTNoMu90_IDTight
HLT_PFMETNoMu120_PFMHTNoMu120_IDTight HLT_PFMETNoMu90_JetIdCleaned_PFMHTNoMu90_IDTight
HLT_PFMETNoMu120_JetIdCleaned_PFMHTNoMu120_IDTight
HLT_MonoCentralPFJet80_PFMETNoMu90_PFMHTNoMu90_IDTight
HLT_MonoCentralPFJet80_PFMETNoMu120_PFMHTNoMu120_IDTight
HLT_MonoCentralPFJet80_PFMETNoMu90_JetIdCleaned_PFMHTNoMu90_IDTight
HLT_MonoCentralPFJet80_PFMETNoMu120_JetIdCleaned_PFMHTNoMu120_IDTight
HLT_Ele27_eta2p1_WPLoose_Gsf_HT200 HLT_Photon90_CaloIdL_PFHT500 HLT_DoubleMu8_Mass8_PFHT250
HLT_Mu8_Ele8_CaloIdM_TrackIdM_Mass8_PFHT250 HLT_DoubleEle8_CaloIdM_TrackIdM_Mass8_PFHT250
HLT_DoubleMu8_Mass8_PFHT300 HLT_Mu8_Ele8_CaloIdM_TrackIdM_Mass8_PFHT300
HLT_DoubleEle8_CaloIdM_TrackIdM_Mass8_PFHT300 HLT_Mu10_CentralPFJet30_BTagCSV0p54PF
HLT_Ele10_CaloIdM_TrackIdM_CentralPFJet30_BTagCSV0p54PF
HLT_Ele15_IsoVVVL_BTagCSV0p72_PFHT400 HLT_Ele15_IsoVVVL_PFHT350_PFMET50
HLT_Ele15_IsoVVVL_PFHT600 HLT_Ele15_IsoVVVL_PFHT350
HLT_Mu10_TrkIsoVVL_DiPFJet40_DEta3p5_MJJ750_HTT350_PFMETNoMu60
HLT_Mu15_IsoVVVL_BTagCSV0p72_PFHT400 HLT_Mu15_IsoVVVL_PFHT350_PFMET50
HLT_Mu15_IsoVVVL_PFHT600 HLT_Mu15_IsoVVVL_PFHT350 HLT_Dimuon16_Jpsi HLT_Dimuon10_Jpsi_Barrel
HLT_Dimuon8_PsiPrime_Barrel HLT_Dimuon8_Upsilon_Barrel HLT_Dimuon0_Phi_Barrel
HLT_Mu16_TkMu0_dEta18_Onia HLT_Mu16_TkMu0_dEta18_Phi HLT_TrkMu15_DoubleTrkMu5NoFiltersNoVtx
HLT_TrkMu17_DoubleTrkMu8NoFiltersNoVtx HLT_Mu8 HLT_Mu17 HLT_Ele8_CaloIdM_TrackIdM_PFJet30
HLT_Ele12_CaloIdM_TrackIdM_PFJet30 HLT_Ele23_CaloIdM_TrackIdM_PFJet30
HLT_Ele33_CaloIdM_TrackIdM_PFJet30 HLT_PFHT450_SixJet40_PFBTagCSV0p72
HLT_PFHT400_SixJet30_BTagCSV0p55_2PFBTagCSV0p72 HLT_PFHT450_SixJet40 HLT_PFHT400_SixJet30
HLT_Ele115_CaloIdVT_GsfTrkIdT HLT_Mu55
HLT_Photon42_R9Id85_OR_CaloId24b40e_Iso50T80L_Photon25_AND_HE10_R9Id65_Eta2_Mass15
HLT_Photon90_CaloIdL_PFHT600 HLT_PixelTracks_Multiplicity60ForEndOfFill
HLT_PixelTracks_Multiplicity85ForEndOfFill HLT_PixelTracks_Multiplicity110ForEndOfFill
HLT_PixelTracks_Multiplicity135ForEndOfFill HLT_PixelTracks_Multiplicity160ForEndOfFill
HLT_ECALHT800 HLT_MET200 HLT_Physics HLT_DoubleMu3_Mass10 HLT_Random HLT_ZeroBias
HLT_AK4CaloJet30 HLT_AK4CaloJet40 HLT_AK4CaloJet50 HLT_AK4CaloJet80 HLT_AK4CaloJet100
HLT_AK4PFJet30 HLT_AK4PFJet50 HLT_AK4PFJet80 HLT_AK4PFJet100
HLT_HISinglePhoton10ForEndOfFill HLT_HISinglePhoton15ForEndOfFill
HLT_HISinglePhoton20ForEndOfFill HLT_HISinglePhoton40 HLT_HISinglePhoton60
HLT_HIL1DoubleMu0BPTX HLT_HIL2Mu3BPTX HLT_HIL2DoubleMu0BPTX HLT_HIL3Mu3BPTX
HLT_FullTrack12ForEndOfFill HLT_FullTrack50 HLT_Activity_Ecal_SC7 HLT_EcalCalibration
HLT_HcalCalibration HLT_GlobalRunHPDNoise HLT_HcalNZS HLT_HcalPhiSym HLT_HcalUTCA
HLT_ZeroBias_IsolatedBunches HLT_Photon500 HLT_Photon600 HLT_Mu300 HLT_Mu350 HLT_MET250
HLT_MET300 HLT_PFMET300 HLT_PFMET400 HLT_HT2000 HLT_HT2500 HLT_IsoTrackHE HLT_IsoTrackHB
HLTriggerFinalPath""".split(),
}
DTYPES = {"f": "f4", "i": "i4", "u": "u1", "b": "?", "I": "u4", "L": "u8"}
